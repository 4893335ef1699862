"""The ``shardwise`` command line.

It sits beside the flows because it is an entry point, like a deployment: it
reads the environment, picks the device, and starts flows. The engine in
``shardwise/`` stays free of both.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from shardwise.environment import engine_logs, set_defaults

# Before anything below imports Prefect, which reads its settings once, when it is imported: the
# parser's options come from the flow's parameters, whose module imports Prefect's tasks.
set_defaults()

from shardwise.flows import cli_commands  # noqa: E402

__all__ = ["entry", "main"]


def entry() -> None:
    """The ``shardwise`` console script: :func:`main`, then an exit without the interpreter's final clean-up.

    Freeing torch's, transformers' and Prefect's modules one by one took about
    2 s after a run had finished. Every exit handler still runs first
    (Prefect's event and log flushes, the stop of its temporary server): this
    one is registered before them all, so it runs last.
    """
    code = [1]  # an exception escaping main exits 1, after its traceback
    atexit.register(_exit_now, code)
    from shardwise.flows.temp_server import start_early
    from shardwise.process.cmdline import wipe_typed_passwords

    argv = sys.argv[1:]  # main parses this copy: a URL's password is wiped from the process's own
    wipe_typed_passwords(argv)  # before any child is forked (ps, and a child until it execs, show them)
    start_early(argv)  # a run's server starts while the parser imports Prefect and torch
    try:
        code[0] = main(argv)
    except SystemExit as exc:  # argparse's usage errors (2) and --help (0)
        code[0] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    if not {"-v", "--verbose"} & set(sys.argv[1:]):
        # Runs before Prefect's own exit handlers (last registered, first run): its "Stopping
        # temporary server" line would otherwise follow the run's closing line.
        atexit.register(logging.getLogger("prefect").setLevel, logging.WARNING)
    sys.exit(code[0])


def _exit_now(code: list[int]) -> None:
    from shardwise.flows.outcome import BROKEN_PIPE, silence_stdout

    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went while the last lines waited in the buffer (see main)
        silence_stdout()
        code[0] = BROKEN_PIPE
    sys.stderr.flush()
    os._exit(code[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return the process exit code (see :mod:`flows.outcome`).

    An error is one line and its exit code; ``-v`` prints its traceback first and keeps the code.
    An unexpected error (a bug) prints its traceback and exits 1. Tracebacks are redacted.
    Stdout closed by its reader (``shardwise runs | head -1``) stops the command quietly with
    :data:`~flows.outcome.BROKEN_PIPE` (141), not as a service failure. Ctrl-C is one line and
    :data:`~flows.outcome.SIGINT_EXIT` (130); ``run`` and ``redrive`` stop on SIGINT and SIGTERM
    within seconds, naming the run to resume (:mod:`flows.interrupts`).
    """
    from shardwise.errors import ConfigError

    try:
        parser = _parser()
    except ConfigError as exc:  # an installed plug-in that cannot be listed (two kinds claiming one flag)
        from shardwise.flows.outcome import code_for, say_error

        say_error(exc)
        return code_for(exc)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    if args.command == "run" and not hasattr(args, "run.resume") and not hasattr(args, "source.location"):
        _subcommand(parser, "run").error("the following arguments are required: --source")  # (see _parser)
    engine_logs(bool(getattr(args, "verbose", False)))
    from shardwise.flows.timeline import mark

    mark("parsed")
    from shardwise.flows.outcome import (
        BROKEN_PIPE,
        RUN_FAILED,
        SIGINT_EXIT,
        code_for,
        print_traceback,
        quiet_console,
        say_error,
        stdout_closed,
    )

    undo = quiet_console() if getattr(args, "verbose", None) is False else None
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:  # Ctrl-C in a command without a run to name (run and redrive have theirs)
        say_error("interrupted by SIGINT")
        return SIGINT_EXIT
    except Exception as exc:
        if stdout_closed(exc):
            return BROKEN_PIPE  # the reader had enough: nothing to report, on either stream
        code = code_for(exc)
        if code == RUN_FAILED:
            print_traceback(exc)  # a bug: the traceback is the message (redacted, as every line)
            return code
        if getattr(args, "verbose", False):
            print_traceback(exc)  # asked for; the exit code stays the error's
        say_error(exc)
        return code
    finally:
        if undo is not None:
            undo()


class _Parser(argparse.ArgumentParser):
    """Usage mistakes in one line that names the fix, instead of the whole usage block; the Prefect
    server's address in a help text is read from Prefect's settings only when that help is printed."""

    def format_help(self) -> str:
        from shardwise.flows.cli_services import API_URL

        text = super().format_help()
        if API_URL in text:
            from shardwise.flows.serving import local_api_url

            text = text.replace(API_URL, local_api_url())
        return text

    def error(self, message: str) -> NoReturn:
        from shardwise.flows.outcome import BAD_INPUT

        self.exit(BAD_INPUT, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _subcommand(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]  # type: ignore[no-any-return]


def _refuse_unknown(parser: argparse.ArgumentParser, command: str, unknown: Sequence[str]) -> NoReturn:
    """Refuse what ``command`` does not take, as its own usage error (pointing at its own ``--help``):
    each unknown option with its closest options, as an abbreviation where it starts some (options are
    never abbreviated: ``--text-colum`` is not ``--text-column``); a value after one is its value."""
    import difflib

    sub = _subcommand(parser, command)
    flags = [flag for a in sub._actions for flag in a.option_strings if flag.startswith("--")]
    said, after_unknown = [], False
    for arg in unknown:
        name = arg.split("=", 1)[0]
        if not name.startswith("-"):
            if not after_unknown:
                said.append(f"{arg!r} is not a value of any option given")
            after_unknown = False
            continue
        after_unknown = "=" not in arg
        starts = [flag for flag in flags if flag.startswith(name)]
        close = starts[:4] or difflib.get_close_matches(name, flags, n=1, cutoff=0.7)
        rule = " (options are never abbreviated)" if starts else ""
        hint = f"; the closest {'is' if len(close) == 1 else 'are'} {', '.join(close)}" if close else ""
        said.append(f"{name} is not an option of {sub.prog}{rule}{hint}")
    sub.error("; ".join(said))


_EXAMPLE_DB = "sqlite:///shardwise-work/shardwise.db"


def _parser() -> argparse.ArgumentParser:
    from shardwise.flows.cli_options import add_score_options
    from shardwise.flows.cli_services import add_service_commands
    from shardwise.flows.outcome import exit_codes_help

    parser = _Parser(
        prog="shardwise",
        allow_abbrev=False,  # here and on each command: --text-colum is a mistake, never --text-column
        description="Batch inference over tables: score a SQL table, or Parquet, CSV or JSON Lines files or "
        "folders of images (local or on S3), with a model, shard by shard, into a SQL table (pgvector "
        "too), a Delta Lake or Iceberg table or Parquet files, each row exactly once and with its "
        "lineage. Each subcommand has its own --help with an example.",
        epilog=exit_codes_help(),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Prefect's log, the engine's (vLLM's) log and the traceback of an error",
    )

    def command(name: str, summary: str, about: str, example: str, **kwargs: Any) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=f"{about}\n\nexample:\n  {example}",
            epilog=exit_codes_help(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
            **kwargs,
        )

    def scoring(name: str, summary: str, about: str, example: str, required: Sequence[str] = ()) -> None:
        parser = command(name, summary, about, example, parents=[verbose])
        add_score_options(parser, name)
        _progress_options(parser)
        for action in parser._actions:
            if action.dest in required:  # optional in the flow's parameters, never on this command
                action.required = True
            if name == "run" and action.dest == "source.location":  # a resume finds its run without it:
                action.required = False  # main() requires it of any other run
        parser.set_defaults(handler=cli_commands.score)

    scoring(
        "run",
        "score a source table into a results table (a Prefect flow run)",
        "Plan the source into shards, score every shard with the model, and merge the results into the\n"
        "results table exactly once, with lineage; bad rows go to shardwise_errors. A live progress bar\n"
        "shows on a terminal. If shards still fail after their retries, the run ends failed (exit 1)\n"
        "and --resume RUN_ID finishes it with the same plan, as it finishes a run whose process died\n"
        "(abandoned in shardwise runs; at once when it ran on this host). Resuming a run that a live\n"
        "process still holds is refused (exit 2) unless --force takes it over.",
        f"shardwise run --source {_EXAMPLE_DB} --table docs --model minilm --only-new",
    )
    scoring(
        "redrive",
        "score again the dead letters of a run whose input changed since (all with --force)",
        "Score again the rows a run dead-lettered (see shardwise_errors), as a new run. By default only\n"
        "rows whose input changed since they failed are taken: someone fixed them. --force takes them\n"
        "all. With nothing changed it says so and exits 0.",
        f"shardwise redrive --source {_EXAMPLE_DB} --table docs --run RUN_ID",
        required=("run.redrive",),  # without a run, a redrive would be a run over the whole table
    )

    plan = command(
        "plan",
        "dry run: shards, rows, prompt tokens, cost, what --only-new skips",
        "Plan the run without scoring or writing anything: how many shards and rows, and how many rows\n"
        "--only-new would skip because they already have a current result.\n"
        "It estimates what the run will cost: prompt tokens counted with the model's tokenizer over every\n"
        "planned row (a sample of a very large table, saying so), completion tokens at most max_new_tokens\n"
        "a row, device-hours from earlier runs of the model in the ledger, and the dollar range. Given\n"
        "--budget-usd or --budget-tokens, it says whether each covers that estimate, and the chunk the run\n"
        "would cut for it (at most a tenth of the budget), or refuses a budget the run would refuse.",
        f"shardwise plan --source {_EXAMPLE_DB} --table docs --rows-per-shard 5000",
        parents=[verbose],
    )
    add_score_options(plan, "plan")
    plan.add_argument(
        "--json",
        action="store_true",
        help="print the plan as one JSON object (rows, prompt_tokens, max_completion_tokens, device_hours, "
        "cost_usd_low, cost_usd_high, ...), for scripts",
    )
    plan.set_defaults(handler=cli_commands.plan)

    runs = command(
        "runs",
        "list recent runs of a results database: live, finished or abandoned",
        "List the latest runs recorded in a results database, newest first: id, status, when it\n"
        "started, the process that holds (or last held) it, shards done of total and rows scored, summed\n"
        "from its shards now. A run still marked running whose process stopped renewing its lease is\n"
        "shown as abandoned, with the command that finishes it (shardwise run --results ... --resume ID);\n"
        "a run its budget stopped, as stopped (--resume RUN_ID with a larger budget goes on). TOKENS,\n"
        "DEVICE-H and COST sum its committed chunks: prompt+completion tokens, device-hours, and dollars\n"
        "where the run was priced (a price per device-hour, or a remote model's token prices).",
        f"shardwise runs --results {_EXAMPLE_DB} --limit 10",
    )
    runs.add_argument(
        "--results",
        metavar="URL|DIR|s3://...|env:NAME",
        help="where the runs' results went: their ledger is found as a run finds it (see --ledger)",
    )
    runs.add_argument(
        "--ledger",
        metavar="URL|env:NAME",
        help="the ledger's database URL or connection name, when runs were given --ledger",
    )
    runs.add_argument(
        "--limit", type=_positive, default=20, metavar="N", help="how many runs to list (default: 20)"
    )
    runs.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per run, a line each (run_id, status, rows, prompt_tokens, "
        "completion_tokens, cached_tokens, device_seconds, cost_usd, ...), for scripts",
    )
    runs.set_defaults(handler=cli_commands.runs)

    cache = command(
        "cache",
        "list or clear the models this host keeps converted (a GGUF file de-quantised)",
        "A GGUF model is de-quantised once and kept, so later runs load it in seconds: under\n"
        "$SHARDWISE_HOME/converted (default ~/.shardwise), at most $SHARDWISE_CONVERTED_MAX_GB GiB\n"
        "(default 8; 0 keeps none), the least recently used going first. list shows each entry, its\n"
        "size and when it was last used; clear removes them all (the next run converts again).",
        "shardwise cache list",
    )
    cache.add_argument("action", choices=("list", "clear"), help="list the entries, or remove them all")
    cache.set_defaults(handler=cli_commands.cache)

    add_service_commands(command)

    demo = command(
        "demo",
        "build a SQLite table and Parquet files from harvested text, score both",
        "Build a SQLite table and Parquet files from docstrings of the installed Python (nothing is\n"
        "downloaded), add a few bad rows, and score both on Prefect's temporary server.",
        "shardwise demo --rows 2000",
        parents=[verbose],
    )
    demo.add_argument("--workdir", type=Path, default=Path("shardwise-work"), help="where files are written")
    demo.add_argument(
        "--model",
        default=None,
        help="catalogue name, model directory or package.module:attribute (default: minilm, or tiny)",
    )
    demo.add_argument("--rows", type=int, default=2000, help="how many texts to harvest (default: 2000)")
    demo.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: auto")
    _progress_options(demo)
    demo.set_defaults(handler=cli_commands.demo)
    return parser


def _progress_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        default="auto",
        choices=("auto", "bar", "lines", "none"),
        help="progress on stderr: a live bar, a line every --progress-every seconds, or none "
        "(default: auto, a bar on a terminal, else lines)",
    )
    parser.add_argument(
        "--progress-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines (default: 10)",
    )


def _positive(value: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return number


if __name__ == "__main__":
    entry()
