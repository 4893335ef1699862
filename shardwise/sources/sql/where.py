"""The operator's ``where`` filter: one SQL boolean expression, parsed, checked and rendered back.

A filter is SQL text, so it is parsed with a real SQL parser (sqlglot, in the
source's dialect: PostgreSQL or SQLite), never pattern-matched. What is
accepted:

* **Exactly one expression.** The text must parse, as a whole, into one
  expression: no ``;``, no statement (``SELECT``, ``DELETE`` ...), no
  unbalanced parenthesis. ``true) OR (true`` is refused, so a filter cannot
  break out of the parentheses it is wrapped in.
* **Only row-level syntax** over the table's own columns: columns (unqualified:
  PostgreSQL reads ``t.f`` as a call of a function ``f(t)``), literals,
  comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``, ``IN (list)``,
  ``BETWEEN``, ``LIKE``/``ILIKE``/``GLOB``/``SIMILAR TO``/``~``, arithmetic,
  ``||``, ``CASE``, ``CAST`` to a built-in type, intervals, arrays with
  ``ANY``/``ALL``, and the JSON operators ``->``, ``->>``, ``@>``.
  **No subqueries** of any kind (``IN (SELECT ...)``, ``EXISTS``): a filter
  selects rows of the source table, and one that needs another table belongs
  in a view. No bind parameters, no ``*``.
* **Only the functions in** :data:`ALLOWED_FUNCTIONS`: common scalar text,
  number, NULL-handling and date/time functions. Nothing that can write, wait
  or reach out (``dblink*``, ``pg_*``, ``lo_*``, ``set_config``, ``nextval``,
  ...) and no user-defined function.

The checked tree is rendered back to SQL by sqlglot's generator, without
comments, and the rendering is parsed and checked once more: what reaches the
database is what was checked. The plan records the filter as the operator
wrote it, so a resumed run compares like with like.

This bounds what a filter can *say*; it does not replace the database's own
rights. The filter runs with the source role's rights and resolves functions,
operators and casts through its ``search_path``, so the source also reads in
read-only transactions (PostgreSQL) or ``query_only`` connections (SQLite),
and a deployment should connect with a read-only role (see docs/how-to/where-filter.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, TokenError, UnsupportedError

from shardwise.errors import ConfigError

__all__ = ["ALLOWED_FUNCTIONS", "SqlFilter", "parse_filter"]

_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite"}

ALLOWED_FUNCTIONS = frozenset(
    {
        # text
        *("lower", "upper", "length", "char_length", "character_length", "octet_length"),
        *("substr", "substring", "trim", "ltrim", "rtrim", "btrim", "replace", "concat"),
        *("left", "right", "position", "strpos", "instr", "split_part", "starts_with"),
        *("reverse", "lpad", "rpad"),
        # NULL handling
        *("coalesce", "nullif", "ifnull"),
        # numbers
        *("abs", "round", "floor", "ceil", "ceiling", "sign", "mod", "greatest", "least"),
        # date and time
        *("now", "current_date", "current_timestamp", "localtimestamp"),
        *("date", "time", "datetime", "julianday", "strftime", "unixepoch", "extract"),
        *("date_part", "date_trunc", "age", "make_date", "to_char", "to_date", "to_timestamp"),
    }
)
"""The functions a filter may call, by the name it is written with (any letter case)."""

# The sqlglot nodes the allowed functions parse into (in either dialect); any
# other known function node is refused. max/min appear because sqlglot renders
# SQLite's greatest/least with the two-argument scalar max/min.
_SAFE_FUNCTIONS: tuple[type[exp.Expr], ...] = (
    *(exp.Lower, exp.Upper, exp.Length, exp.Substring, exp.Trim, exp.Replace, exp.Concat),
    *(exp.Left, exp.Right, exp.StrPosition, exp.SplitPart, exp.StartsWith, exp.Reverse, exp.Pad),
    *(exp.Coalesce, exp.Nullif, exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Sign),
    *(exp.Greatest, exp.Least, exp.Max, exp.Min),
    *(exp.CurrentDate, exp.CurrentTimestamp, exp.Localtimestamp),
    *(exp.Date, exp.Time, exp.Datetime, exp.Extract, exp.TimestampTrunc, exp.DateTrunc),
    *(exp.TimeToStr, exp.ToChar, exp.TsOrDsToTimestamp, exp.StrToDate, exp.UnixToTime),
)

# Row-level syntax: names, literals, operators. Checked before _SAFE_FUNCTIONS
# because sqlglot models some syntax (CAST, CASE, ->>) as function nodes.
_SAFE_SYNTAX: tuple[type[exp.Expr], ...] = (
    *(exp.Column, exp.Identifier, exp.Var, exp.Literal, exp.Boolean, exp.Null),
    *(exp.HexString, exp.BitString, exp.ByteString, exp.RawString, exp.UnicodeString),
    *(exp.Paren, exp.Tuple, exp.And, exp.Or, exp.Xor, exp.Not),
    *(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ),
    *(exp.Is, exp.In, exp.Between, exp.Like, exp.ILike, exp.Glob, exp.SimilarTo, exp.Escape),
    *(exp.RegexpLike, exp.RegexpILike),
    *(exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg, exp.DPipe),
    *(exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot),
    *(exp.Cast, exp.DataType, exp.DataTypeParam, exp.Case, exp.If, exp.Interval),
    *(exp.Array, exp.Any, exp.All, exp.ArrayContainsAll),
    *(exp.JSONExtract, exp.JSONExtractScalar, exp.JSONBExtract, exp.JSONBExtractScalar),
    *(exp.JSONPath, exp.JSONPathKey, exp.JSONPathRoot, exp.JSONPathSubscript),
)

_EXAMPLE = "\"lang = 'en' AND length(text) > 10\""


@dataclass(frozen=True)
class SqlFilter:
    """A filter that passed :func:`parse_filter`; only :attr:`sql` is ever sent to the database."""

    text: str
    """As the operator wrote it: recorded in the plan and shown in messages."""
    sql: str
    """Rendered from the checked expression tree, in the source's dialect, without comments."""


def _refused(where: str, rule: str, fix: str) -> ConfigError:
    return ConfigError(f"where filter {where!r} {rule}; {fix}")


def _parse(where: str, dialect: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(where, read=dialect, into=exp.Condition)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        near = f" near {first['highlight']!r}" if first.get("highlight") else ""
        detail = f"{first.get('description', 'does not parse')}{near}"
    except TokenError as exc:
        detail = str(exc).splitlines()[0]
    raise _refused(
        where,
        f"is not one SQL boolean expression ({detail})",
        f"write a single condition on the table's columns, such as {_EXAMPLE}: no ';', no statement, "
        "balanced parentheses",
    )


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return str(type(node).sql_names()[0]).lower() if isinstance(node, exp.Func) else type(node).__name__


def _refusal(node: exp.Expr) -> tuple[str, str] | None:
    """Why ``node`` may not appear in a filter, and the fix; None when it may."""
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star) or node.table:
            return f"uses {node.sql()!r}", "name the table's columns unqualified, one by one"
        return None
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.USERDEFINED:
        return f"casts to the type {node.sql()!r}", "cast to a built-in type, or filter in a view"
    if isinstance(node, _SAFE_SYNTAX):
        return None
    if isinstance(node, (exp.Query, exp.Subquery, exp.Exists)):
        return "holds a subquery", "filter on the table's own columns, or select from a view that joins"
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        return f"holds a bind parameter {node.sql()!r}", "write the value itself"
    if isinstance(node, _SAFE_FUNCTIONS) or (
        isinstance(node, exp.Anonymous) and _name(node) in ALLOWED_FUNCTIONS
    ):
        return None
    if isinstance(node, exp.Func):
        allowed = ", ".join(sorted(ALLOWED_FUNCTIONS))
        return f"calls {_name(node)}(), which a filter may not", f"filters may call only: {allowed}"
    return f"uses {_name(node)} syntax ({node.sql()!r}), which a filter may not", (
        f"write one condition such as {_EXAMPLE}, or filter in a view"
    )


def _check(where: str, tree: exp.Expr) -> None:
    for node in tree.walk():
        why = _refusal(node)
        if why is not None:
            raise _refused(where, *why)


def parse_filter(where: str, dialect: str) -> SqlFilter:
    """Parse, check and render ``where`` for ``dialect`` (SQLAlchemy's name); refuse with a ConfigError."""
    read = _DIALECTS.get(dialect)
    if read is None:
        raise _refused(
            where,
            f"cannot be checked for a {dialect} source (filters are checked for: {', '.join(_DIALECTS)})",
            "select the rows in a view and read that",
        )
    tree = _parse(where, read)
    _check(where, tree)
    try:
        sql = tree.sql(dialect=read, comments=False, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        raise _refused(
            where,
            f"cannot be written back faithfully for {dialect} ({str(exc).splitlines()[0]})",
            "rewrite it with the dialect's own functions",
        ) from exc
    _check(where, _parse(sql, read))  # the text sent is checked too, not only the tree it came from
    return SqlFilter(where, sql)
