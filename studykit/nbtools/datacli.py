"""``python -m studykit data``: the index of ``data/`` and the one command that rebuilds what is generated there.

``data/campaigns.toml`` (the manifest) has one ``[campaign."PATH"]`` per folder of committed records or results
(PATH relative to ``data/``; a file where its folder holds unrelated files): the question it answers, date,
machine, the kit's commit, the command that produced it, and whether it is current, superseded (by which entry)
or archived. A generated entry carries its ``generator``: ``verify`` (``python -m studykit verify`` with its
records and arguments), ``report`` (a benchmark script's ``report()`` rebuilding tables from the records file in the
folder, or from a list of them, one per round of a campaign measured in rounds) or ``main`` (a module's ``main(argv)``). Each ``[[block]]`` names the builder of one generated README block
(the text between ``<!-- MARKER:begin -->`` and ``<!-- MARKER:end -->``), a name of :data:`BUILDERS`.

    python -m studykit data list [--status current]
    python -m studykit data show NAME                            # one entry, its command included
    python -m studykit data regen --check [--only NAME ...]      # rebuild in a temporary folder and compare
    python -m studykit data regen --out DIR                      # rebuild into DIR (data/ needs --overwrite-committed)

Entries are rebuilt first, then blocks, which read the files under ``data/``. The check compares numbers within a
tolerance (:data:`RTOL`, :data:`ATOL`; a number printed with decimals may also differ by one unit in its last
printed digit, a rounding flip) and everything else exactly; a gzipped CSV (``.csv.gz``, as ``verify`` writes its
predictions) is compared as the CSV it holds.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import importlib
import importlib.util
import io
import json
import math
import re
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from studykit import paths
from studykit.nbtools import codec_blocks as CB
from studykit.nbtools import hook_blocks as HB
from studykit.nbtools import readme_blocks as RB

MANIFEST = paths.DATA / "campaigns.toml"
STATUSES = ("current", "superseded", "archive")
#: generator kind -> its required fields
GENERATOR_FIELDS = {"verify": ("records", "args"), "report": ("script", "records", "outputs"), "main": ("module", "argv")}
#: the files ``verify --out`` writes (the predictions gzipped: ``studykit.perfmodel.verify.files``)
VERIFY_OUTPUTS = ("predictions.csv.gz", "summary.csv", "networks.csv", "by_batch.csv")
RTOL = 1e-4  # relative tolerance of a regenerated number (the committed CSVs carry 6 significant digits)
ATOL = 1e-8  # absolute tolerance, for numbers near zero
_ENTRY_KEYS = ("question", "date", "machine", "commit", "status", "superseded_by", "note", "command", "generator")
_REQUIRED = ("question", "date", "machine", "commit", "status")
_BLOCK_KEYS = ("file", "marker", "builder", "args", "kwargs", "key")


class ManifestError(ValueError):
    """The manifest is malformed; the message names the entry, the field and what is valid."""


@dataclass(frozen=True)
class Entry:
    """One campaign of the manifest: ``path`` relative to ``data/``."""
    path: str
    question: str
    date: str
    machine: str
    commit: str
    status: str
    command: Optional[str] = None
    superseded_by: tuple[str, ...] = ()
    note: Optional[str] = None
    generator: Optional[dict] = None

    @property
    def outputs(self) -> tuple[str, ...]:
        """The generated files, relative to ``data/`` (none without a generator)."""
        g = self.generator
        if g is None:
            return ()
        if g["kind"] == "verify":
            return tuple(f"{self.path}/{n}" for n in VERIFY_OUTPUTS)
        if "outputs" in g:
            return tuple(f"{self.path}/{n}" for n in g["outputs"])
        return (self.path,)

    def shell_command(self) -> str:
        """What produced it: ``command``, or for a ``verify`` entry without one its verify call from the repository root."""
        if self.command:
            return self.command
        if self.generator and self.generator["kind"] == "verify":
            g = self.generator
            return " ".join(["python -m studykit verify --records", *g["records"], *g["args"],
                             f"--out data/{self.path}", paths.OVERWRITE_FLAG])
        return "unknown"


@dataclass(frozen=True)
class Block:
    """One generated README block: the text between its markers in ``file`` (relative to ``data/``)."""
    file: str
    marker: str
    builder: str
    args: tuple = ()
    kwargs: Optional[dict] = None
    key: object = None

    @property
    def name(self) -> str:
        return f"{self.file}#{self.marker}"


@dataclass(frozen=True)
class Manifest:
    """The parsed ``data/campaigns.toml``."""
    entries: dict[str, Entry]
    blocks: tuple[Block, ...]

    def block(self, file: str, marker: str) -> Block:
        """The block ``marker`` of ``file``; ``KeyError`` naming the blocks of that file otherwise."""
        for b in self.blocks:
            if b.file == file and b.marker == marker:
                return b
        raise KeyError(f"no block {marker!r} in {file}; its blocks: {[b.marker for b in self.blocks if b.file == file]}")


# ---------------------------------------------------------------------------------------------------- reading
def _fail(where: str, msg: str) -> None:
    raise ManifestError(f"{where}: {msg}")


def _check_generator(where: str, g: object) -> dict:
    kind = g.get("kind") if isinstance(g, dict) else None
    if kind not in GENERATOR_FIELDS:
        _fail(where, f"generator.kind must be one of {', '.join(GENERATOR_FIELDS)}, got {kind!r}")
    missing = [k for k in GENERATOR_FIELDS[g["kind"]] if k not in g]
    if missing:
        _fail(where, f"a {g['kind']} generator needs {', '.join(missing)} (it has {', '.join(sorted(g))})")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in g.items()}  # lists frozen: entries are shared


def load_manifest(path: Path | str = MANIFEST) -> Manifest:
    """Read and validate the manifest: every required field, a known status, superseded entries naming entries."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from exc
    extra = set(raw) - {"campaign", "block"}
    if extra:
        _fail(str(path), f"unknown top-level key(s) {sorted(extra)}; valid: campaign, block")
    entries = {}
    for name, e in raw.get("campaign", {}).items():
        where = f"{path.name}: campaign {name!r}"
        unknown = set(e) - set(_ENTRY_KEYS)
        if unknown:
            _fail(where, f"unknown field(s) {sorted(unknown)}; valid: {', '.join(_ENTRY_KEYS)}")
        missing = [k for k in _REQUIRED if not isinstance(e.get(k), str) or not e[k].strip()]
        if missing:
            _fail(where, f"needs {', '.join(missing)} (text; 'unknown' where nothing says)")
        if e["status"] not in STATUSES:
            _fail(where, f"status {e['status']!r} is not one of {', '.join(STATUSES)}")
        sup = tuple(e.get("superseded_by", "").split())
        if (e["status"] == "superseded") != bool(sup):
            _fail(where, "superseded_by names the successor(s) of a superseded entry, and only of one")
        gen = _check_generator(where, e["generator"]) if "generator" in e else None
        if not e.get("command") and not (gen and gen["kind"] == "verify"):
            _fail(where, "needs a command (what produced it; 'unknown' where nothing says)")
        entries[name] = Entry(name, e["question"], e["date"], e["machine"], e["commit"], e["status"], e.get("command"),
                              sup, e.get("note"), gen)
    for e in entries.values():
        for s in e.superseded_by:
            if s not in entries:
                _fail(f"{path.name}: campaign {e.path!r}", f"superseded_by {s!r} is not a campaign of the manifest")
    blocks = []
    for i, b in enumerate(raw.get("block", [])):
        where = f"{path.name}: block {i + 1} ({b.get('file')}#{b.get('marker')})"
        unknown = set(b) - set(_BLOCK_KEYS)
        if unknown:
            _fail(where, f"unknown field(s) {sorted(unknown)}; valid: {', '.join(_BLOCK_KEYS)}")
        if not all(isinstance(b.get(k), str) for k in ("file", "marker", "builder")):
            _fail(where, "needs file, marker and builder")
        if b["builder"] not in BUILDERS:
            _fail(where, f"builder {b['builder']!r} is not one of {', '.join(BUILDERS)}")
        key = b.get("key")
        blocks.append(Block(b["file"], b["marker"], b["builder"], tuple(b.get("args", ())), b.get("kwargs"),
                            tuple(key) if isinstance(key, list) else key))
    names = [b.name for b in blocks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        _fail(str(path), f"blocks listed twice: {dup}")
    return Manifest(entries, tuple(blocks))


# ---------------------------------------------------------------------------------------------------- the index
def data_files(data: Path = paths.DATA) -> list[str]:
    """Every committed data file under ``data`` (relative paths), READMEs and the manifest left out."""
    return sorted(str(f.relative_to(data)) for f in data.rglob("*")
                  if f.is_file() and f.name != "README.md" and f != data / MANIFEST.name)


def unlisted(manifest: Manifest, data: Path = paths.DATA) -> list[str]:
    """Folders (or files) of ``data`` that no entry covers: a file is covered by an entry for itself or its folder."""
    out = set()
    for f in data_files(data):
        parent = str(Path(f).parent)
        if f not in manifest.entries and parent not in manifest.entries:
            out.add(f if parent == "." else parent)
    return sorted(out)


def dangling(manifest: Manifest, data: Path = paths.DATA) -> list[str]:
    """Paths the manifest names that do not exist: entries, generator inputs and README files of blocks."""
    out = [f"campaign {p}" for p in manifest.entries if not (data / p).exists()]
    for e in manifest.entries.values():
        g = e.generator or {}
        inputs = list(g.get("records", ())) if g.get("kind") == "verify" else []
        inputs += [a for a in g.get("args", ()) + g.get("argv", ()) if "/" in a and "{out}" not in a]
        out += [f"campaign {e.path}: {p}" for p in inputs if not (paths.ROOT / p).exists()]
        if g.get("kind") == "report":
            out += [f"campaign {e.path}: {r}" for r in report_records(g) if not (data / e.path / r).exists()]
    out += [f"block {b.name}" for b in manifest.blocks if not (data / b.file).exists()]
    return out


def show(entry: Entry) -> str:
    """Every field of ``entry`` as text, its command (derived for a verify entry) and generated files included."""
    lines = [entry.path] + [f"  {k}: {getattr(entry, k)}" for k in ("question", "date", "machine", "commit", "status")]
    if entry.superseded_by:
        lines.append(f"  superseded by: {', '.join(entry.superseded_by)}")
    if entry.note:
        lines.append(f"  note: {entry.note}")
    lines.append("  command:\n" + "\n".join(f"    {x}" for x in entry.shell_command().splitlines()))
    if entry.outputs:
        lines.append(f"  generated: {', '.join(entry.outputs)}")
    return "\n".join(lines)


def _pipe(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: where superseded and archived entries live: ``data/archive/`` + their path below ``data/``
ARCHIVE = "archive/"


def archived(entry: Entry) -> bool:
    """Whether ``entry`` lies under ``data/archive/``."""
    return entry.path.startswith(ARCHIVE)


def table(manifest: Manifest, status: Optional[str] = None, prefix: str = "") -> str:
    """The entries (of ``status``, under ``prefix``) as a Markdown table: each entry is its path below ``data/``, and
    the status of one that is not current says whether it lies in ``data/archive/``."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    rows = ["| entry | status | date | machine | question |", "|---|---|---|---|---|"]
    for e in manifest.entries.values():
        if (status is None or e.status == status) and e.path.startswith(prefix):
            st = e.status + (f" by {', '.join(e.superseded_by)}" if e.superseded_by else "")
            if e.status != "current" or archived(e):
                st += f"; {'in' if archived(e) else 'not in'} data/{ARCHIVE}"
            rows.append(f"| `{e.path}` | {st} | {e.date} | {_pipe(e.machine)} | {_pipe(e.question)} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------------- comparing
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _last_digit(token: str) -> float:
    """One unit in the last printed digit of a number with decimals (0 for an integer: no rounding flip)."""
    mant, _, exp = token.lower().partition("e")
    if "." not in mant:
        return 0.0
    return 10.0 ** (int(exp or 0) - len(mant.split(".")[1]))


def text_difference(new: str, old: str) -> tuple[bool, float, str]:
    """``(within tolerance, largest relative difference of a number, where they differ)``: the text between the
    numbers must be equal, numbers within :data:`RTOL` or one unit in their last printed digit."""
    if new == old:
        return True, 0.0, ""
    a, b = _NUMBER.split(new), _NUMBER.split(old)
    na, nb = _NUMBER.findall(new), _NUMBER.findall(old)
    if a != b or len(na) != len(nb):
        line = next((f"{x!r} vs {y!r}" for x, y in zip(new.splitlines(), old.splitlines()) if x != y),
                    f"{len(new.splitlines())} vs {len(old.splitlines())} lines")
        return False, math.inf, f"text differs: {line[:300]}"
    worst = 0.0
    for x, y in zip(na, nb):
        fx, fy = float(x), float(y)
        if fx == fy:
            continue
        rel = abs(fx - fy) / max(abs(fx), abs(fy))
        worst = max(worst, rel)
        if abs(fx - fy) > max(RTOL * max(abs(fx), abs(fy)), ATOL, 1.01 * max(_last_digit(x), _last_digit(y))):
            return False, rel, f"{x} vs {y} (committed)"
    return True, worst, ""


def _close(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= ATOL + RTOL * abs(y)


def _is_csv(path: Path) -> bool:
    """A CSV file, plain (``.csv``) or gzipped (``.csv.gz``)."""
    return path.name.endswith((".csv", ".csv.gz"))


def _same_gzipped_text(new: Path, old: Path) -> bool:
    """Two gzipped files that decompress to the same bytes (two gzip streams of one text may differ: another
    compression level or header); false where either is not gzip."""
    import gzip
    import zlib

    try:
        return gzip.decompress(new.read_bytes()) == gzip.decompress(old.read_bytes())
    except (OSError, EOFError, zlib.error):  # gzip.BadGzipFile is an OSError
        return False


def _csv_difference(new: Path, old: Path) -> tuple[bool, float, str]:
    """A CSV file (``.csv`` or ``.csv.gz``, read by pandas either way) against the committed one: the same columns
    and rows, numbers within tolerance, text by :func:`text_difference`."""
    import pandas as pd

    a, b = pd.read_csv(new), pd.read_csv(old)  # compression inferred from the name (.gz: gzip)
    if list(a.columns) != list(b.columns):
        return False, math.inf, f"columns {list(a.columns)} vs {list(b.columns)} (committed)"
    if len(a) != len(b):
        return False, math.inf, f"{len(a)} rows vs {len(b)} (committed)"
    worst = 0.0
    for col in a.columns:
        if pd.api.types.is_numeric_dtype(a[col]) and pd.api.types.is_numeric_dtype(b[col]):
            for i, (x, y) in enumerate(zip(a[col].astype(float), b[col].astype(float))):
                if x == y or (math.isnan(x) and math.isnan(y)):
                    continue
                rel = abs(x - y) / max(abs(x), abs(y)) if not (math.isnan(x) or math.isnan(y)) else math.inf
                worst = max(worst, rel)
                if not _close(x, y):
                    return False, rel, f"column {col}, row {i + 2}: {x!r} vs {y!r} (committed)"
        else:
            for i, (x, y) in enumerate(zip(a[col].fillna("").astype(str), b[col].fillna("").astype(str))):
                ok, rel, where = text_difference(x, y)
                if not ok:
                    return False, rel, f"column {col}, row {i + 2}: {where}"
                worst = max(worst, rel)
    return True, worst, ""


def _json_difference(a: object, b: object, where: str, ignore: frozenset) -> tuple[bool, float, str]:
    """Parsed JSON ``a`` against the committed ``b``: numbers within tolerance, strings as text, the rest equal;
    the dotted paths in ``ignore`` (e.g. a fit's timestamp) are left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in a if f"{where}.{k}".lstrip(".") not in ignore]
        other = [k for k in b if f"{where}.{k}".lstrip(".") not in ignore]
        if sorted(keys) != sorted(other):
            return False, math.inf, f"{where or 'top level'}: keys {sorted(set(keys) ^ set(other))} differ"
        pairs = [(a[k], b[k], f"{where}.{k}".lstrip(".")) for k in keys]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False, math.inf, f"{where}: {len(a)} items vs {len(b)} (committed)"
        pairs = [(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
    elif isinstance(a, str) and isinstance(b, str):
        ok, rel, w = text_difference(a, b)
        return ok, rel, f"{where}: {w}" if w else ""
    elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)) and a != b:
        rel = abs(a - b) / max(abs(a), abs(b)) if not (math.isnan(a) or math.isnan(b)) else math.inf
        ok = _close(float(a), float(b))
        return ok, rel, "" if ok else f"{where}: {a!r} vs {b!r} (committed)"
    else:
        return a == b, 0.0 if a == b else math.inf, "" if a == b else f"{where}: {a!r} vs {b!r} (committed)"
    worst = 0.0
    for x, y, w in pairs:
        ok, rel, detail = _json_difference(x, y, w, ignore)
        if not ok:
            return ok, rel, detail
        worst = max(worst, rel)
    return True, worst, ""


def _records(path: Path) -> object:
    """A generated JSON file's content; a JSONL file's records through the kit's one reader (every line kept, the
    reader's ``source`` left out: the regenerated and the committed file lie in different folders)."""
    if path.suffix == ".jsonl":
        from studykit.measure.records import load_records

        return [{k: v for k, v in r.items() if k != "source"} for r in load_records(path, dedupe=False, quiet=True)]
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Outcome:
    """One regenerated file (or block) against the committed one."""
    name: str        # the entry or block
    file: str        # relative to data/
    verdict: str     # identical | within tolerance | differs | missing
    max_rel: float = 0.0
    detail: str = ""


def compare_files(new: Path, old: Path, name: str, file: str, ignore: Iterable[str] = ()) -> Outcome:
    """``new`` against the committed ``old``: byte for byte (a gzipped CSV's decompressed bytes), else within
    tolerance by the file's kind (a ``.csv.gz`` read as CSV, as a ``.csv``)."""
    if not new.exists() or not old.exists():
        return Outcome(name, file, "missing", math.inf, "not regenerated" if old.exists() else "not committed")
    if new.read_bytes() == old.read_bytes() or (new.name.endswith(".csv.gz") and _same_gzipped_text(new, old)):
        return Outcome(name, file, "identical")
    if _is_csv(new):
        try:
            ok, rel, where = _csv_difference(new, old)
        except (ValueError, OSError, EOFError) as exc:  # a damaged file (pandas' parser errors are ValueErrors)
            ok, rel, where = False, math.inf, f"could not be read as CSV: {exc}"
    elif new.suffix in (".json", ".jsonl"):
        ok, rel, where = _json_difference(_records(new), _records(old), "", frozenset(ignore))
    else:
        ok, rel, where = text_difference(new.read_text(encoding="utf-8"), old.read_text(encoding="utf-8"))
    return Outcome(name, file, "within tolerance" if ok else "differs", rel, where)


# ---------------------------------------------------------------------------------------------------- blocks
def marked(text: str, marker: str) -> str:
    """The text between ``<!-- marker:begin -->`` and ``<!-- marker:end -->``."""
    a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    if a not in text or b not in text:
        raise ValueError(f"the markers of block {marker!r} are missing ({a.strip()} ... {b})")
    return text[text.index(a) + len(a):text.index(b)]


def splice(text: str, marker: str, block: str) -> str:
    """``text`` with the block ``marker`` replaced by ``block``."""
    marked(text, marker)
    a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    return text[:text.index(a) + len(a)] + block + text[text.index(b):]


BUILDERS: dict[str, Callable[..., object]] = {
    "summary": RB.summary_block, "implied_encode_decode": RB.implied_encode_decode_block, "hook_budget": RB.hook_budget_block,
    "coalesce_picks": RB.coalesce_picks_block,
    "hook_gamma": RB.hook_gamma_block, "hook_variants": RB.hook_variants_block, "gamma_measured": RB.gamma_measured_block,
    "claims": RB.claims_block, "folders": RB.folders_block, "crossovers": RB.crossovers_block,
    "crossovers_at_scale": RB.crossovers_at_scale_block, "hook_runners": HB.hook_runners_block, "hook_views": HB.hook_views_block,
    "codec_runs": CB.codec_runs_block, "codec_rerun": CB.codec_rerun_block,
    "nvlink_checks": RB.nvlink_checks_blocks, "nvlink_alone": RB.nvlink_alone_blocks,
    "nvlink_rounds": RB.nvlink_rounds_blocks, "orthogonalization": RB.orthogonalization_blocks,
    "trace_ab": RB.trace_ab_block, "benchmark_hook_targets": RB.benchmark_hook_targets_block,
    "hook_vs_post": RB.hook_vs_post_block, "fp16_vs_torch": RB.fp16_vs_torch_block,
    "rerun_spread": RB.rerun_spread_block, "measured_crossovers": RB.measured_crossovers_block,
    "hook_host": RB.hook_host_blocks, "codec_kernels": CB.codec_kernels_blocks, "atomo": CB.atomo_block,
    "topk_ddp": RB.topk_ddp_block, "tta": RB.tta_block, "tta_tuned": RB.tta_tuned_block,
    "lr": RB.lr_block,
}


def report_records(generator: dict) -> list[str]:
    """A ``report`` generator's records files: its one file, or its list of them (a campaign measured in rounds)."""
    r = generator["records"]
    return [r] if isinstance(r, str) else list(r)


def _module(file: str):
    """A Python file of the repository (a benchmark script) as a module."""
    path = paths.ROOT / file
    if not path.is_file():
        raise ValueError(f"{file}: no such file in the repository ({paths.ROOT})")
    spec = importlib.util.spec_from_file_location(f"studykit_data_{Path(file).stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _arg(a: object) -> object:
    return paths.ROOT / a if isinstance(a, str) and a.startswith("data/") else a


def build_block(block: Block) -> str:
    """The text ``block``'s builder makes now."""
    if block.builder not in BUILDERS:
        raise ValueError(f"block {block.name}: builder {block.builder!r} is not one of {', '.join(BUILDERS)}")
    out = BUILDERS[block.builder](*map(_arg, block.args), **(block.kwargs or {}))
    if isinstance(out, dict):
        out = out[block.key if block.key is not None else block.marker]
    return out


# ---------------------------------------------------------------------------------------------------- generators
def verify_args(entry: Entry, records: bool = True) -> list[str]:
    """``--records ...`` (unless ``records`` is false) and the arguments of a ``verify`` entry, with absolute paths."""
    g = entry.generator
    if not g or g["kind"] != "verify":
        raise ValueError(f"{entry.path} is not a verify entry")
    head = ["--records", *map(str, map(_arg, g["records"]))] if records else []
    return head + [str(_arg(a)) for a in g["args"]]


def _build_entry(entry: Entry, dest: Path, overwrite_committed: bool) -> None:
    """Rebuild ``entry``'s generated files at ``dest`` (its folder, or its file for a file entry)."""
    g = entry.generator
    flag = [paths.OVERWRITE_FLAG] if overwrite_committed else []
    committed = paths.DATA / entry.path
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        if g["kind"] == "verify":
            from studykit.perfmodel import verify

            rc = verify.main(["verify", *verify_args(entry), "--out", str(dest), "--quiet", *flag])
        elif g["kind"] == "main":  # from the repository root, as committed outputs name their inputs relative to it
            argv = [a.replace("{out}", str(dest)) for a in g["argv"]]
            (dest if committed.is_dir() else dest.parent).mkdir(parents=True, exist_ok=True)
            with contextlib.chdir(paths.ROOT):
                rc = importlib.import_module(g["module"]).main(argv + flag)
        else:  # report: the script's report() reads the records file(s) in the folder and writes beside them
            dest.mkdir(parents=True, exist_ok=True)
            if dest.resolve() != committed.resolve():
                for name in report_records(g):
                    shutil.copy(committed / name, dest / name)
                for name in g["outputs"]:  # a README gets its block rewritten, not written from nothing
                    if name == "README.md":
                        shutil.copy(committed / name, dest / name)
            records = dest / g["records"] if isinstance(g["records"], str) else [dest / r for r in g["records"]]
            text = _module(g["script"]).report(records, **g.get("kwargs", {}))
            if "returns" in g:
                (dest / g["returns"]).write_text(text, encoding="utf-8")
            rc = 0
    if rc:
        raise RuntimeError(f"{entry.path}: the {g['kind']} generator exited {rc}: {err.getvalue().strip()[-500:]}")


def select(manifest: Manifest, only: Optional[Iterable[str]] = None) -> tuple[list[Entry], list[Block]]:
    """The generated entries and the blocks named by ``only`` (entry paths, ``FILE#MARKER`` or a README file for all of
    its blocks; shell patterns allowed), every one of them without it."""
    gen = [e for e in manifest.entries.values() if e.generator]
    if not only:
        return gen, list(manifest.blocks)
    entries, blocks = [], []
    for pat in only:
        e = [x for x in gen if fnmatch.fnmatchcase(x.path, pat)]
        b = [x for x in manifest.blocks if fnmatch.fnmatchcase(x.name, pat) or fnmatch.fnmatchcase(x.file, pat)]
        if not e and not b:
            names = [x.path for x in gen] + [x.name for x in manifest.blocks]
            near = difflib.get_close_matches(pat, names, n=5, cutoff=0.5)
            plain = [p for p in manifest.entries if fnmatch.fnmatchcase(p, pat)]
            why = f"{plain[0]} is not generated (no generator)" if plain else f"nothing generated matches {pat!r}"
            raise ValueError(f"--only {pat}: {why}; closest generated names: {near or names[:5]}")
        entries += [x for x in e if x not in entries]
        blocks += [x for x in b if x not in blocks]
    return entries, blocks


def _progress(items: list, desc: str, enabled: bool):
    from studykit.measure.runtime import progress

    return progress(items, total=len(items), desc=desc, enabled=enabled)


def check(manifest: Optional[Manifest] = None, only: Optional[Iterable[str]] = None,
          progress: bool = True) -> list[Outcome]:
    """Rebuild the selected entries in a temporary folder and every selected block in memory; each generated file
    and block against the committed one."""
    manifest = manifest or load_manifest()
    entries, blocks = select(manifest, only)
    out = []
    with tempfile.TemporaryDirectory(prefix="studykit-data-") as tmp:
        for item in _progress(entries + blocks, "data regen --check", progress):
            if isinstance(item, Entry):
                dest = Path(tmp) / item.path
                _build_entry(item, dest, False)
                ignore = item.generator.get("ignore", ())
                out += [compare_files(Path(tmp) / f, paths.DATA / f, item.path, f, ignore) for f in item.outputs]
            else:
                want, have = build_block(item), marked((paths.DATA / item.file).read_text(encoding="utf-8"), item.marker)
                ok, rel, where = text_difference(want, have)
                verdict = "identical" if want == have else "within tolerance" if ok else "differs"
                out.append(Outcome(item.name, item.file, verdict, rel, where))
    return out


def regen(manifest: Optional[Manifest] = None, only: Optional[Iterable[str]] = None, out: Optional[Path] = None,
          overwrite_committed: bool = False, progress: bool = True) -> list[str]:
    """Rebuild the selected entries and blocks into ``out`` (default ``data/``, refused there without
    ``overwrite_committed``); returns the files written, relative to ``out``."""
    manifest = manifest or load_manifest()
    # data/ itself is rebuilt in place; elsewhere inside it, the rebuilt tree would land among its own records
    in_place = out is None or Path(out).expanduser().resolve() == paths.DATA.resolve()
    inputs = None if in_place else {"folder data/ (to rebuild it in place, leave out --out)": [paths.DATA]}
    root = paths.check_writable_output(out or paths.DATA, overwrite_committed, what="--out", sources=inputs)
    entries, blocks = select(manifest, only)
    written = []
    for item in _progress(entries + blocks, "data regen", progress):
        if isinstance(item, Entry):
            _build_entry(item, root / item.path, overwrite_committed)
            written += list(item.outputs)
        else:
            target = root / item.file
            source = target if target.exists() else paths.DATA / item.file
            text = splice(source.read_text(encoding="utf-8"), item.marker, build_block(item))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(item.file)
    return sorted(set(written))


def report(outcomes: list[Outcome]) -> str:
    """A summary of a check: counts per verdict, the largest difference within tolerance, every file that differs."""
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("identical", "within tolerance", "differs", "missing")}
    within = [o for o in outcomes if o.verdict == "within tolerance"]
    lines = [", ".join(f"{n} {v}" for v, n in count.items())]
    if within:
        w = max(within, key=lambda o: o.max_rel)
        lines.append(f"largest difference within tolerance: {w.max_rel:.2g} relative ({w.file})")
    lines += [f"{o.verdict.upper()}: {o.file} ({o.name}): {o.detail}" for o in outcomes
              if o.verdict in ("differs", "missing")]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit data", description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", default=str(MANIFEST), help="the manifest (default data/campaigns.toml)")
    sub = ap.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="the manifest's entries as a table")
    ls.add_argument("--status", choices=STATUSES, help="only entries of this status")
    sh = sub.add_parser("show", help="every field of some entries, the command included")
    sh.add_argument("names", nargs="+", metavar="NAME", help="entries (data-relative paths; shell patterns allowed)")
    rg = sub.add_parser("regen", help="rebuild every generated file and README block from the manifest")
    rg.add_argument("--check", action="store_true",
                    help="rebuild into a temporary folder and compare with the committed files (exit 1 on a difference "
                         "beyond float tolerance)")
    rg.add_argument("--only", nargs="+", metavar="NAME",
                    help="entries (data-relative paths), blocks (FILE#MARKER) or README files; shell patterns allowed")
    rg.add_argument("--out", default=None, help="rebuild into this folder instead of data/")
    rg.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow rebuilding into the committed data/")
    rg.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "data":
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    manifest = load_manifest(args.manifest)
    if args.action == "list":
        print(table(manifest, args.status), end="")
        return 0
    if args.action == "show":
        for pat in args.names:
            hits = [e for p, e in manifest.entries.items() if fnmatch.fnmatchcase(p, pat)]
            if not hits:
                near = difflib.get_close_matches(pat, list(manifest.entries), n=5, cutoff=0.5)
                raise ValueError(f"no entry matches {pat!r}; closest: {near or 'none'}")
            for e in hits:
                print(show(e))
        return 0
    start = time.perf_counter()
    if args.check:
        outcomes = check(manifest, args.only, progress=not args.quiet)
        print(f"data regen --check: {len(outcomes)} files and blocks in {time.perf_counter() - start:.0f} s")
        print(report(outcomes))
        return 1 if any(o.verdict in ("differs", "missing") for o in outcomes) else 0
    written = regen(manifest, args.only, Path(args.out) if args.out else None, args.overwrite_committed,
                    progress=not args.quiet)
    print(f"data regen: wrote {len(written)} files in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
