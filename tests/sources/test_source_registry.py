"""The source registry: kinds found through the ``shardwise.sources`` entry points, built-ins included,
a location dispatched by scheme or by its files' suffixes, and one line for what no kind reads."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import ConfigError
from shardwise.sources import open_source, registry
from shardwise.sources.base import SourcePlan

THIRD_PARTY = """
from dataclasses import dataclass

from shardwise.sources.registry import SourceKindOptions

from shardwise.sources import ParquetSource


class TsvOptions(SourceKindOptions):
    delimiter: str = "\\t"


@dataclass(frozen=True)
class TsvKind:
    name: str = "tsv"
    label: str = "TSV files"
    extra: str | None = None
    schemes: tuple[str, ...] = ("tsvdb",)
    suffixes: tuple[str, ...] = (".tsv",)
    whole_files: bool = False
    options: type = TsvOptions

    def open(self, location, options, own):
        OPENED.append((location, options.key))
        DELIMITERS.append(own.delimiter)
        return ParquetSource(location if "://" not in location else ".", options.key, options.text_column)

    def on_this_host(self, location):
        return False

    def watcher(self, spec, emit, *, seen=None, **options):
        raise NotImplementedError("a test kind is not watched")


OPENED = []
DELIMITERS = []
KIND = TsvKind()


class FilterOptions(SourceKindOptions):
    where: str | None = None


@dataclass(frozen=True)
class GreedyKind:
    name: str = "greedy"
    label: str = "greedy tables"
    extra: str | None = None
    schemes: tuple[str, ...] = ("greedy",)
    suffixes: tuple[str, ...] = ()
    whole_files: bool = False
    options: type = FilterOptions

    def open(self, location, options, own):
        WHERES.append(own.where)
        return ParquetSource(".", options.key, options.text_column)

    def on_this_host(self, location):
        return False

    def watcher(self, spec, emit, *, seen=None, **options):
        raise NotImplementedError("a test kind is not watched")


WHERES = []
GREEDY = GreedyKind()


@dataclass(frozen=True)
class NeedsPackageKind:
    name: str = "needy"
    label: str = "needy tables"
    extra: str | None = "needy"
    schemes: tuple[str, ...] = ("needy",)
    suffixes: tuple[str, ...] = ()
    whole_files: bool = False
    options: type = SourceKindOptions

    def open(self, location, options, own):
        import shardwise_missing_package  # noqa: F401

    def on_this_host(self, location):
        return False

    def watcher(self, spec, emit, *, seen=None, **options):
        raise NotImplementedError("a test kind is not watched")


NEEDY = NeedsPackageKind()
"""


@pytest.fixture
def third_party(tmp_path: Path) -> Iterator[object]:
    """An installed package that registers two source kinds, as ``pip install`` would leave it."""
    site = tmp_path / "site"
    (site / "tsv_source").mkdir(parents=True)
    (site / "tsv_source" / "__init__.py").write_text(THIRD_PARTY)
    info = site / "tsv_source-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tsv-source\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[shardwise.sources]\ntsv = tsv_source:KIND\nneedy = tsv_source:NEEDY\ngreedy = tsv_source:GREEDY\n"
    )
    sys.path.insert(0, str(site))
    registry.clear_cache()
    try:
        import tsv_source

        yield tsv_source
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("tsv_source", None)
        registry.clear_cache()


def test_the_built_in_kinds_are_registered_as_entry_points() -> None:
    assert {"sql", "parquet", "images"} <= set(registry.kind_names())
    sql = registry.source_kind("sql")
    assert isinstance(sql, registry.SourceKind) and "postgresql" in sql.schemes and sql.suffixes == ()
    assert registry.source_kind("parquet").suffixes == (".parquet",)
    assert ".png" in registry.source_kind("images").suffixes


def test_an_unknown_scheme_names_the_known_kinds() -> None:
    with pytest.raises(ConfigError) as caught:
        open_source("mysql://root@db/app", table="docs")
    message = str(caught.value)
    assert "source scheme 'mysql' is not supported" in message and "\n" not in message
    assert "sql (postgresql:// postgres:// sqlite://)" in message and "parquet (.parquet)" in message


def test_an_unknown_kind_in_a_plan_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"source kind 'orc' is not registered; known kinds: .*parquet"):
        registry.source_kind("orc")


def test_a_table_of_a_database_is_still_required() -> None:
    with pytest.raises(ConfigError, match=r"sqlite://\.\.\. is a database, so a table is needed"):
        open_source("sqlite:///x.db")


def test_a_third_party_kind_is_found_by_scheme_and_by_suffix(third_party: object, tmp_path: Path) -> None:
    assert {"tsv", "needy"} <= set(registry.kind_names())
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.tsv").write_text("id\ttext\n1\thello\n")
    with open_source(str(folder), key="k") as source:
        assert source.kind == "parquet"  # the plug-in's own choice of source class
    with open_source("tsvdb://host/db", key="k2") as source:
        pass
    assert [(str(folder), "k"), ("tsvdb://host/db", "k2")] == third_party.OPENED  # type: ignore[attr-defined]


def test_a_missing_package_names_the_extra_that_installs_it(third_party: object) -> None:
    with pytest.raises(ConfigError) as caught:
        open_source("needy://somewhere")
    assert str(caught.value) == (
        "source kind 'needy' needs package 'shardwise_missing_package', which is not installed; "
        "pip install 'shardwise[needy]'"
    )


def test_files_of_two_kinds_are_refused_in_one_line(third_party: object, tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1], "text": ["a"]}), tmp_path / "a.parquet")
    (tmp_path / "b.tsv").write_text("id\ttext\n2\tb\n")
    with pytest.raises(ConfigError) as caught:
        open_source(str(tmp_path))
    message = str(caught.value)
    assert "holds 1 parquet files (.parquet), 1 tsv files (.tsv)" in message and "\n" not in message


def test_files_of_an_unknown_format_name_the_known_kinds(tmp_path: Path) -> None:
    (tmp_path / "part-0.orc").write_text("not a format any kind reads")
    with pytest.raises(ConfigError) as caught:
        open_source(str(tmp_path))
    message = str(caught.value)
    assert message.startswith(
        "the source location holds no file that a source kind reads (1 other files, such"
    )
    assert "'part-0.orc'" in message and "parquet (.parquet)" in message and str(tmp_path) not in message
    with open_source(str(tmp_path / "part-0.orc")) as source:  # one file named outright: read as Parquet
        assert source.kind == "parquet"
    with open_source(str(tmp_path / "missing")) as source:  # the Parquet source's check says why
        assert source.kind == "parquet"


def test_a_plan_stored_before_the_registry_reopens_an_image_folder() -> None:
    stored = (
        '{"kind": "parquet", "identity": "/p", "snapshot": null, "params": {"images": true}, "shards": []}'
    )
    plan = SourcePlan.from_json(stored)
    assert plan.kind == "images" and plan.by_objects
    old_parquet = SourcePlan.from_json(stored.replace('"images": true', '"key": "id"'))
    assert old_parquet.kind == "parquet" and old_parquet.by_objects
    assert not SourcePlan.from_json(stored.replace('"parquet"', '"sql"')).by_objects
    assert SourcePlan.from_json(plan.to_json()) == plan


def test_a_kind_owns_its_options_and_another_kinds_are_refused_by_flag(
    third_party: object, tmp_path: Path, sqlite_url: str
) -> None:
    """The plug-in's ``delimiter`` reaches its ``open`` checked; given for a SQL source it is refused,
    naming the flag, and the SQL kind's ``where`` given for the plug-in's files is refused the same way
    (by ``--sql-where``: the plug-in's ``greedy`` kind declares a ``where`` too)."""
    (tmp_path / "a.tsv").write_text("id\ttext\n1\thello\n")
    with open_source(str(tmp_path), kind_options={"tsv": {"delimiter": ","}}):
        pass
    with open_source(str(tmp_path)):
        pass
    assert third_party.DELIMITERS == [",", "\t"]  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as caught:
        open_source(sqlite_url, table="docs", kind_options={"tsv": {"delimiter": ","}})
    assert str(caught.value) == (
        f"delimiter ',' applies to tsv sources, and source {sqlite_url!r} is read as a sql source; "
        "drop --delimiter"
    )
    with pytest.raises(ConfigError) as caught:
        open_source(
            "postgresql+psycopg://app:hunter2@db/prod", table="docs", kind_options={"tsv": {"delimiter": ","}}
        )
    assert "source 'postgresql+psycopg://app:***@db/prod' is read as a sql" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(
        ConfigError, match=r"where 'id > 1' applies to sql sources, .* tsv source; drop --sql-where$"
    ):
        open_source(str(tmp_path), kind_options={"sql": {"where": "id > 1"}})
    with open_source(str(tmp_path), kind_options={"sql": {"query_timeout_s": 300.0}}):
        pass  # a default spelled out is not given
    with pytest.raises(ConfigError, match=r"^sep is not an option of a tsv source; its options: delimiter$"):
        open_source(str(tmp_path), kind_options={"tsv": {"sep": ","}})
    with pytest.raises(
        ConfigError, match=r"source options are given for source kind 'csvx', which is not installed; .*tsv"
    ):
        open_source(str(tmp_path), kind_options={"csvx": {"delimiter": ","}})


def test_the_kinds_options_form_one_section_each(third_party: object) -> None:
    """The flow's ``source.options`` has a section per kind with options; a kind that declares an option
    another kind declares too loads, and each of the two takes ``--KIND-OPTION`` as its flag, while an
    option no other kind declares keeps its plain flag."""
    sections = registry.source_options_model().model_fields
    assert {"sql", "tsv", "greedy"} <= set(sections)
    assert set(sections["sql"].annotation.model_fields) == {"where", "query_timeout_s"}
    assert registry.source_kind("greedy").name == "greedy"
    flags = registry.source_option_flags()
    assert flags[("sql", "where")] == "--sql-where" and flags[("greedy", "where")] == "--greedy-where"
    assert (
        flags[("sql", "query_timeout_s")] == "--query-timeout"
        and flags[("tsv", "delimiter")] == "--delimiter"
    )
    with open_source(
        "greedy://db", kind_options={"greedy": {"where": "x"}, "sql": {"query_timeout_s": 300.0}}
    ):
        pass
    assert third_party.WHERES == ["x"]  # type: ignore[attr-defined]
