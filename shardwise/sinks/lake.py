"""What the lake sinks (Delta, Parquet files) share: where the table is, its Arrow schema, rows as Arrow.

A lake table lives at ``<location>/<table>``: ``location`` is a local
directory or ``s3://bucket/prefix``, ``table`` the run's ``--results-table``
(a plain identifier). Its columns are the SQL sink's: ``source_key`` (int64
or string), one column per model output, then the lineage columns.

How outputs are stored: a vector is ``list<float32>`` (built from one
stacked numpy array, never element by element: a chunk of 8192 rows of
384-d vectors converts in milliseconds); float is float64, int is int64,
text is string. A json output is JSON text made by
``json.dumps(value, ensure_ascii=False)`` for *every* value, strings
included, so any JSON value round-trips (the string ``"a"`` is stored as
``"\\"a\\""``); :func:`arrow_rows` decodes it again.

S3 settings come from boto3's standard chain (environment, profile,
``AWS_ENDPOINT_URL``), as the S3 source's do: :func:`s3_client` and
:func:`s3_storage_options` ask a boto3 session, never ``os.environ``.
Credentials appear in no message, log or ``target``.

A store call that fails on S3 may be a passing fault (a cut answer, a
throttled request) or a bucket that is not there or not this caller's. The
sinks tell them apart by asking S3 about the bucket itself
(:func:`bucket_refusal`, a ``HeadBucket`` answered with a status code),
never by reading the store library's error text: a missing or refused bucket
is a :class:`~shardwise.errors.ConfigError` naming the bucket, anything
else is retried under the run's policy.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.db.codec import as_vector, check_key
from shardwise.errors import ConfigError, ShardwiseError
from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import Layout, Lineage
from shardwise.sinks.naming import check_outputs
from shardwise.sinks.registry import sink_kinds

__all__ = [
    "LakeLocation",
    "LakeSink",
    "S3Settings",
    "arrow_rows",
    "arrow_schema",
    "bucket_refusal",
    "layout_refusal",
    "refuse_other_format",
    "rows_table",
    "s3_client",
    "s3_storage_options",
    "schema_differences",
    "stored_fingerprints",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_KINDS: dict[str, pa.DataType] = {
    "vector": pa.list_(pa.float32()),
    "float": pa.float64(),
    "int": pa.int64(),
    "text": pa.string(),
    "json": pa.string(),
}


@dataclass(frozen=True)
class S3Settings:
    """Overrides of boto3's standard chain for a lake sink on S3; credentials always come from the chain.

    ``endpoint_url`` (an S3-compatible store; otherwise ``AWS_ENDPOINT_URL``
    as boto3 reads it), ``region`` and ``profile`` (a named AWS profile).
    """

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.endpoint_url is not None and not self.endpoint_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"S3Settings.endpoint_url must start with http:// or https://; got {self.endpoint_url!r}"
            )


@dataclass(frozen=True)
class LakeLocation:
    """``<location>/<table>`` parsed: ``bucket`` is None for a local directory."""

    location: str
    table: str

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not _IDENT.match(self.table):
            raise ConfigError(
                f"lake table name {self.table!r} is not a plain identifier; use letters, digits and "
                "underscores, starting with a letter or underscore (for example docs_embeddings)"
            )
        if not self.location or (self.location.startswith("s3://") and self.bucket is None):
            raise ConfigError(
                f"lake location {self.location!r} names no directory or bucket; give a local directory "
                "or s3://bucket/prefix"
            )
        if "://" in self.location and not self.location.startswith("s3://"):
            raise ConfigError(
                f"lake location {self.location!r} has an unsupported scheme; use a local directory "
                "or s3://bucket/prefix"
            )

    @property
    def bucket(self) -> str | None:
        if not self.location.startswith("s3://"):
            return None
        return self.location.removeprefix("s3://").partition("/")[0] or None

    @property
    def prefix(self) -> str:
        """The table's key prefix inside the bucket, without a trailing slash (S3 only)."""
        inside = self.location.removeprefix("s3://").partition("/")[2].strip("/")
        return f"{inside}/{self.table}" if inside else self.table

    @property
    def uri(self) -> str:
        """The table's own location: ``s3://bucket/prefix/table`` or an absolute local path."""
        if self.bucket is not None:
            return f"s3://{self.bucket}/{self.prefix}"
        import os

        return os.path.join(os.path.abspath(self.location), self.table)


def refuse_other_format(where: LakeLocation, fmt: str, target: str, s3: S3Settings | None) -> None:
    """A ConfigError when the table's folder already holds a table of another sink kind than ``fmt``: one
    folder holds one format, and each installed kind names the marker its table leaves at the folder's
    root (:meth:`~shardwise.sinks.registry.SinkKind.folder_marker`)."""
    kinds = sink_kinds()
    own = kinds[fmt].folder_marker() if fmt in kinds else None
    for other in kinds.values():
        marker = other.folder_marker()
        if other.name != fmt and marker is not None and marker != own and _exists(where, marker, s3):
            raise ConfigError(
                f"{target}: the folder already holds a {other.name} table ({marker} is there); a folder "
                f"holds one format: give another --results-table, or --results-format {other.name}"
            )


def _exists(where: LakeLocation, name: str, s3: S3Settings | None) -> bool:
    if where.bucket is None:
        import os

        return os.path.exists(os.path.join(where.uri, name))
    from shardwise.sources.files.s3_errors import s3_boundary

    client = s3_client(s3)
    try:
        with s3_boundary(f"listing the results bucket {where.bucket!r}"):
            found = client.list_objects_v2(Bucket=where.bucket, Prefix=f"{where.prefix}/{name}", MaxKeys=1)
    finally:
        client.close()
    return bool(found.get("KeyCount"))


_MISSING_BUCKET = frozenset({"404", "NoSuchBucket", "NotFound"})
_REFUSED_BUCKET = frozenset({"403", "AccessDenied", "Forbidden", "AllAccessDisabled"})


def bucket_refusal(bucket: str, s3: S3Settings | None) -> ConfigError | None:
    """The error for a results bucket that does not exist or refuses these credentials; None when S3
    says it is there (or cannot say now: then the failure that led here is a passing one).

    Names the bucket alone, never the location's path: a bucket name is no secret.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = s3_client(s3)
    except (BotoCoreError, ShardwiseError):
        return None
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _MISSING_BUCKET:
            return ConfigError(
                f"results bucket {bucket!r} does not exist (S3 answered {code} for it); create it "
                f"(aws s3 mb s3://{bucket}) or give --results an s3:// location in an existing bucket"
            )
        if code in _REFUSED_BUCKET:
            return ConfigError(
                f"results bucket {bucket!r} refuses these credentials (S3 answered {code} for it); give "
                "credentials that may list, read and write it (AWS_PROFILE, AWS_ACCESS_KEY_ID...), or "
                "another --results bucket"
            )
        return None
    except BotoCoreError:
        return None
    finally:
        client.close()
    return None


def arrow_schema(layout: Layout) -> pa.Schema:
    """The table's schema: key, outputs in declared order, then lineage; nullable only where SQL's is."""
    check_outputs(layout.outputs)
    key = pa.int64() if layout.key_type == "int" else pa.string()
    return pa.schema(
        [
            pa.field("source_key", key, nullable=False),
            *(pa.field(out.name, _KINDS[out.kind]) for out in layout.outputs),
            pa.field("truncated", pa.bool_(), nullable=False),
            pa.field("model_name", pa.string(), nullable=False),
            pa.field("model_version", pa.string(), nullable=False),
            pa.field("input_fingerprint", pa.string(), nullable=False),
            pa.field("code_version", pa.string(), nullable=False),
            pa.field("input_snapshot", pa.string()),
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("shard_id", pa.int32(), nullable=False),
            pa.field("scored_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


def schema_differences(
    found: Sequence[tuple[str, str, bool]], wanted: Sequence[tuple[str, str, bool]], *, ours: bool = False
) -> tuple[list[str], list[str]]:
    """Each difference between two column lists of ``(name, type, nullable)``, in words, and the nullable
    wanted columns ``found`` lacks, to add, when Shardwise made the table (``ours``; otherwise those are
    differences too: a table the user made is never altered)."""
    have = {name: (kind, nullable) for name, kind, nullable in found}
    problems, missing = [], []
    for name, kind, nullable in wanted:
        if name not in have and ours and nullable:
            missing.append(name)
        elif name not in have:
            problems.append(f"column {name!r} ({kind}) is missing")
        elif have[name][0] != kind:
            problems.append(f"column {name!r} is {have[name][0]}, expected {kind}")
    names = {name for name, _, _ in wanted}
    problems += [f"extra column {n!r} is not nullable" for n, _, null in found if n not in names and not null]
    return problems, missing


def layout_refusal(kind: str, target: str, problems: list[str], *, ours: bool) -> ConfigError:
    """The one line for an existing lake table whose columns differ from what the run stores."""
    made = "" if ours else " Shardwise did not make it (it lacks Shardwise's marker), so never alters it;"
    return ConfigError(
        f"{kind} table {target} already exists with a different layout: {'; '.join(problems)}.{made} "
        "choose another --results-table (or give the existing table those columns yourself)"
    )


def rows_table(rows: Sequence[ResultRow], lineage: Lineage, layout: Layout, schema: pa.Schema) -> pa.Table:
    """The rows as an Arrow table of ``schema`` (see :func:`arrow_schema`), lineage columns filled in."""
    n = len(rows)
    keys = [check_key(row.key, layout.key_type, "lake table") for row in rows]
    columns: list[pa.Array] = [pa.array(keys, schema.field("source_key").type)]
    columns += [_output_array(out, [row.values.get(out.name) for row in rows]) for out in layout.outputs]
    columns.append(pa.array([row.truncated for row in rows], pa.bool_()))
    columns.append(pa.repeat(pa.scalar(lineage.model_name, pa.string()), n))
    columns.append(pa.repeat(pa.scalar(lineage.model_version, pa.string()), n))
    columns.append(pa.array([row.input_fingerprint for row in rows], pa.string()))
    columns.append(pa.repeat(pa.scalar(lineage.code_version, pa.string()), n))
    columns.append(pa.repeat(pa.scalar(lineage.input_snapshot, pa.string()), n))
    columns.append(pa.repeat(pa.scalar(lineage.run_id, pa.string()), n))
    columns.append(pa.repeat(pa.scalar(lineage.shard_id, pa.int32()), n))
    columns.append(pa.repeat(pa.scalar(lineage.scored_at, pa.timestamp("us", tz="UTC")), n))
    return pa.Table.from_arrays(columns, schema=schema)


def _output_array(out: OutputColumn, values: list[Any]) -> pa.Array:
    if out.kind == "vector":
        return _vector_array(out, values)
    if out.kind == "json":
        values = [None if v is None else json.dumps(v, ensure_ascii=False) for v in values]
    return pa.array(values, _KINDS[out.kind])


def _vector_array(out: OutputColumn, values: list[Any]) -> pa.Array:
    """One list<float32> column from one stacked (rows, dim) array; None rows become nulls."""
    dim = int(out.dim or 0)
    missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    stacked = np.zeros((len(values), dim), dtype=np.float32)
    for i, value in enumerate(values):
        if value is not None:
            stacked[i] = as_vector(value, out.name, dim)
    offsets = pa.array(np.arange(len(values) + 1, dtype=np.int32) * dim)
    mask = pa.array(missing) if missing.any() else None
    return pa.ListArray.from_arrays(offsets, pa.array(stacked.reshape(-1)), mask=mask)


def stored_fingerprints(data: pa.Table, scan: Callable[[Any, Any], pa.Table]) -> dict[Any, str]:
    """Stored key → input fingerprint, for the keys of the chunk ``data``. ``scan(low, high)`` reads the
    columns ``(source_key, input_fingerprint)`` of the stored rows of the chunk's model version whose key
    lies between the chunk's lowest and highest; the keys in that range the chunk lacks are dropped."""
    if data.num_rows == 0:
        return {}
    keys = data.column("source_key")
    bounds = pc.min_max(keys)
    found = scan(bounds["min"].as_py(), bounds["max"].as_py())
    found = found.filter(pc.is_in(found.column("source_key"), value_set=keys.combine_chunks()))
    return dict(zip(found.column(0).to_pylist(), found.column(1).to_pylist(), strict=True))


def arrow_rows(table: pa.Table, layout: Layout) -> list[dict[str, Any]]:
    """Rows as dicts: vectors as float32 arrays, json decoded, ``scored_at`` an aware UTC datetime."""
    vectors = [out.name for out in layout.outputs if out.kind == "vector"]
    texts = [out.name for out in layout.outputs if out.kind == "json"]
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        for name in vectors:
            if row.get(name) is not None:
                row[name] = np.asarray(row[name], dtype=np.float32)
        for name in texts:
            if row.get(name) is not None:
                row[name] = json.loads(row[name])
    return rows


_SESSION_LOCK = threading.Lock()  # boto3 sessions are not thread-safe; the clients they make are


def _session(settings: S3Settings | None) -> Any:
    import boto3

    return boto3.session.Session(
        profile_name=settings.profile if settings else None,
        region_name=settings.region if settings else None,
    )


def s3_client(settings: S3Settings | None) -> Any:
    """A boto3 S3 client from the standard chain with ``settings`` applied; share it between threads."""
    with _SESSION_LOCK:
        session = _session(settings)
        endpoint = settings.endpoint_url if settings else None
        return session.client("s3", endpoint_url=endpoint)


def s3_storage_options(settings: S3Settings | None) -> dict[str, str]:
    """delta-rs storage options resolved by boto3: endpoint, region, credentials, ``allow_http``.

    The endpoint is the one the boto3 client resolves (``AWS_ENDPOINT_URL``,
    ``AWS_ENDPOINT_URL_S3``, the profile's ``endpoint_url``), passed on only
    when it is not AWS's own. Temporary credentials are frozen at the time of
    the call; a sink resolves them again whenever it opens the table.
    """
    with _SESSION_LOCK:
        session = _session(settings)
        client = session.client("s3", endpoint_url=settings.endpoint_url if settings else None)
        credentials = session.get_credentials()
        region = session.region_name or client.meta.region_name or "us-east-1"
    options = {"AWS_REGION": region}
    endpoint = str(client.meta.endpoint_url)
    client.close()
    if not endpoint.endswith(".amazonaws.com") and "amazonaws.com/" not in endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        options["AWS_ACCESS_KEY_ID"] = frozen.access_key
        options["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            options["AWS_SESSION_TOKEN"] = frozen.token
    return options


class LakeSink:
    """What a sink whose table lives at ``<location>/<table>`` (Delta, Parquet files) keeps: where the
    table is, its layout and Arrow schema, the S3 overrides and the run's retry policy. A kind subclasses
    it, gives ``kind`` (the ``target``'s prefix) and makes its own handles in :meth:`_handles`."""

    kind: ClassVar[str]

    def __init__(
        self,
        location: str,
        table: str,
        layout: Layout,
        *,
        s3: S3Settings | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._where = LakeLocation(location, table)
        self.layout = layout
        self.target = f"{self.kind}:{location.rstrip('/')}/{table}"
        self._schema = arrow_schema(layout)
        self._s3 = s3
        self._retry = retry or RetryPolicy()
        self._closed = False
        self._handles()

    def _handles(self) -> None:
        """Make the kind's own table or store handles (none until first used)."""

    def _refusal(self) -> ConfigError | None:
        """The error for a missing or refused results bucket; None for a local table, or a bucket S3
        says is there."""
        return None if self._where.bucket is None else bucket_refusal(self._where.bucket, self._s3)
