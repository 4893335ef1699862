"""An option given where it would do nothing is refused before the run (issue 39, item 9): one line
naming the option, why it does nothing here and the fix, exit 2, no run in the ledger and no flow run.
Before, each was accepted and silently ignored. A value equal to the default is not given: the same
options at their defaults (as prefect.yaml's deployments set some) still run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.sources.images.access import DEFAULT_MAX_BYTES
from shardwise.sources.sql.timeout import DEFAULT_QUERY_TIMEOUT_S

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"))


def _cases(tmp_path: Path, lm: Path) -> dict[str, tuple[list[str], str]]:
    """Each case: the options added to a run of ``tiny`` over the docs table, and what the line says."""
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), parquet / "part.parquet")
    generator = ["--model", str(lm), "--chat", "off"]
    return {
        "index metric without an index": (
            ["--index-metric", "l2"],
            "index_metric 'l2' is the distance of an HNSW index, and index is 'none', so no index is built; "
            "give --index hnsw, or drop --index-metric",
        ),
        "min agreement at fp32": (
            ["--precision", "fp32", "--min-agreement", "0.9"],
            "min_agreement 0.9 is the accuracy guard's threshold for a reduced precision, and precision is "
            "fp32, which the guard never checks; drop --min-agreement, or give --precision auto, bf16, fp16 "
            "or int8",
        ),
        "query timeout on Parquet": (
            ["--source", str(parquet), "--results", str(tmp_path / "out"), "--query-timeout", "5"],
            f"query_timeout_s 5.0 applies to sql sources, and source '{parquet}' is read as a parquet "
            "source; drop --query-timeout",
        ),
        "image byte cap on text": (
            ["--image-max-bytes", "1000"],
            "image_max_bytes 1000 caps the pictures an image column or folder reads, and this run reads "
            "text; drop --image-max-bytes, or give --image-column",
        ),
        "image root on text": (
            ["--image-root", str(tmp_path)],
            f"--image-root '{tmp_path}' would do nothing: it says where an image column's references may "
            "point, and no image_column is given (an image folder reads its own folder); drop --image-root, "
            "or give --image-column",
        ),
        "image bucket on text": (
            ["--image-bucket", "photos"],
            "--image-bucket 'photos' would do nothing: it says where an image column's references may point",
        ),
        "deployment with the thread runner": (
            ["--deployment", "score-shard/other"],
            "--deployment 'score-shard/other' would do nothing: it names the deployment runner's per-shard "
            "flow, and runner is 'thread'; drop it, or give --runner deployment",
        ),
        "embedding type for a generator": (
            [*generator, "--embedding-type", "array"],
            f"--embedding-type array stores vector outputs, and model 'hf:{lm}' writes none (generated_text, "
            "finish_reason, prompt_tokens, completion_tokens); drop --embedding-type, or give an embedding "
            "model",
        ),
        "top p and seed when greedy": (
            [*generator, "--top-p", "0.9", "--seed", "3"],
            "top_p 0.9 and seed 3 apply when sampling, and temperature is 0: greedy decoding draws nothing; "
            "give --temperature above 0, or drop --top-p and --seed",
        ),
        "seed at temperature 0": (
            [*generator, "--temperature", "0", "--seed", "3"],
            "seed 3 applies when sampling, and temperature is 0: greedy decoding draws nothing; give "
            "--temperature above 0, or drop --seed",
        ),
        "an index for a generator": (
            [*generator, "--index", "hnsw"],
            f"--index hnsw stores vector outputs, and model 'hf:{lm}' writes none",
        ),
    }


CASES = [
    "index metric without an index",
    "min agreement at fp32",
    "query timeout on Parquet",
    "image byte cap on text",
    "image root on text",
    "image bucket on text",
    "deployment with the thread runner",
    "embedding type for a generator",
    "an index for a generator",
    "top p and seed when greedy",
    "seed at temperature 0",
]


@pytest.mark.parametrize("case", CASES)
def test_an_option_that_would_do_nothing_is_refused_before_the_run(
    case: str, docs: str, lm: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    extra, said = _cases(tmp_path, lm)[case]
    argv = ["run", "--source", docs, "--table", "docs", "--model", "tiny", "--shards", "1"]
    if "--source" in extra:  # a Parquet source takes no table
        argv = ["run", "--model", "tiny", "--shards", "1"]
    before = flow_runs()
    capfd.readouterr()
    code = main([*argv, *extra])
    err = one_line(capfd)
    assert code == 2, err
    assert said in err, err
    assert ledger_runs(docs) == 0
    assert flow_runs() == before


def test_the_same_options_at_their_defaults_are_not_refused(
    docs: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A default is not "given": a deployment or a script that spells every default out still plans."""
    defaults = [
        "--index-metric", "cosine", "--index", "none", "--embedding-type", "auto",
        "--query-timeout", f"{DEFAULT_QUERY_TIMEOUT_S:g}", "--image-max-bytes", str(DEFAULT_MAX_BYTES),
        "--deployment", "score-shard/per-shard", "--precision", "fp32",
    ]  # fmt: skip
    assert main(["plan", "--source", docs, "--table", "docs", "--model", "tiny", *defaults]) == 0
    assert (
        main(["plan", "--source", docs, "--table", "docs", "--model", "tiny", "--min-agreement", "0.9"]) == 0
    )
    capfd.readouterr()
