"""``python -m studykit notebooks``: run every notebook headless with papermill.

Parameters come from a profile YAML (``params/smoke.yaml``: CPU, seconds;
``params/full.yaml``: GPUs) whose top-level keys are notebook names. Executed
copies (and HTML) go to ``reports/`` with ``index.html`` (links, parameters, run
times, thumbnails of each notebook's first figures) and ``summary.json`` (the same,
as data, with provenance). ``--table`` prints the README's notebook table from a
``summary.json`` without running anything.
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from studykit import argtypes, paths

#: the question each notebook answers (README table, index); a notebook not listed falls back to its title
QUESTIONS = {
    "tour": "What does data-parallel training send, what does it cost, and why does compression rarely pay?",
    "compressor_gallery": "What does each compressor do to a real gradient: bytes, error, what survives?",
    "profile": "How expensive is each compressor, collective and backward pass on my hardware?",
    "calibrate": "What are my cluster's constants (alpha, bandwidth, gamma, T_comp, T_encode_decode)?",
    "what_if": "Would compression pay at other bandwidths, compute speeds or ratios (the paper's figures)?",
    "explorer": "When does a compressor beat syncSGD? (sliders on the performance model)",
    "time_to_accuracy": "Do static and dynamic compression reach the accuracy sooner than FP16?",
    "verify": "How close are the model's predicted iteration times to measured ones?",
    "bandwidth": "At which network bandwidth does compression start to pay on real GPUs (measured)?",
    "paper_figures": "How do syncSGD and compression scale with GPUs, batch size and overlap (the paper's Figs. 4-10)?",
}
#: images per notebook shown in the index
THUMBNAILS = 2
THUMB_PX = (320, 220)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def discover(directory: Path = paths.NOTEBOOKS) -> list[Path]:
    """The kit's notebooks, in name order (``tour`` first when present)."""
    nbs = sorted(p for p in directory.glob("*.ipynb") if not p.name.startswith("_"))
    return sorted(nbs, key=lambda p: (p.stem != "tour", p.stem))


class _ProfileLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``, merge keys ``<<: *name``): a few hundred bytes of
    nested aliases ("billion laughs") stand for billions of values once the parameters are printed or injected."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ValueError(f"YAML aliases are refused in a parameter profile (alias *{event.anchor} at line "
                             f"{event.start_mark.line + 1}); write each value out")
        return super().compose_node(parent, index)


def load_profile(path: Path | str) -> dict[str, dict]:
    """Read a profile: ``{notebook_stem: {parameter: value}}``. Invalid YAML or an alias raises ``ValueError``
    naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"parameter profile {path} not found (or not a file); profiles: "
                                f"{', '.join(str(p) for p in sorted(paths.PARAMS.glob('*.yaml')))}")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_ProfileLoader) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    except (ValueError, OSError) as exc:  # an alias, text that is not UTF-8
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"{path}: expected a mapping of notebook name -> mapping of parameters")
    return data


class ParameterError(ValueError):
    """A profile sets a parameter a notebook does not have, or one of the wrong type; or a notebook's
    parameters cannot be read (not a notebook, a ``parameters`` cell that does not parse)."""


_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}


def _cells(nb: Path | str) -> list[dict]:
    """The cells of a notebook file; :class:`ParameterError` naming it where it is not a readable notebook."""
    try:
        cells = json.loads(Path(nb).read_text(encoding="utf-8"))["cells"]
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise TypeError("'cells' is not a list of cells")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ParameterError(f"{nb}: not a notebook ({type(exc).__name__}: {exc})") from None
    return cells


def parameters(nb: Path | str) -> dict[str, str]:
    """The notebook's ``parameters`` cell as ``{name: type name}`` (read with ``ast``; no kernel).

    Each line is a typed literal (STYLE item 2): ``name: type = value  # comment``; a bare
    ``name = value`` takes its value's type. A file that is not a notebook, or a cell that does not
    parse, raises :class:`ParameterError` naming the notebook.
    """
    import ast

    src = next(("".join(c.get("source", "")) for c in _cells(nb)
                if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if src is None:
        return {}
    try:
        body = ast.parse(src).body
    except SyntaxError as exc:
        raise ParameterError(f"{nb}: its parameters cell does not parse (line {exc.lineno}: {exc.msg}); "
                             "fix the notebook") from None
    out: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = ast.unparse(node.annotation)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    try:
                        out[t.id] = type(ast.literal_eval(node.value)).__name__
                    except ValueError:
                        out[t.id] = "object"
    return out


def _type_ok(value, type_name: str) -> bool:
    t = _TYPES.get(type_name)
    if t is None:  # an annotation the checker does not know (Optional[...], ...): accept
        return True
    if value is None:
        return False
    if t is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


def check_profile(profile: dict[str, dict], notebooks: list[Path], source: str = "profile") -> None:
    """Refuse, before any kernel starts, a profile that names an unknown notebook or sets a parameter a
    notebook's ``parameters`` cell lacks or of another type; the message names notebook, parameter and type."""
    known = {p.stem: p for p in notebooks}
    problems = []
    for name, params in profile.items():
        if name not in known:
            problems.append(f"unknown notebook {name!r} (notebooks: {', '.join(sorted(known))})")
            continue
        declared = parameters(known[name])
        for key, value in params.items():
            if key not in declared:
                problems.append(f"notebook {name!r} has no parameter {key!r} (its parameters: "
                                f"{', '.join(declared) or 'none'})")
            elif not _type_ok(value, declared[key]):
                problems.append(f"notebook {name!r} parameter {key!r} expects {declared[key]}, got "
                                f"{type(value).__name__} {value!r}")
    if problems:
        raise ParameterError(f"{source}: " + "; ".join(problems))


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names the notebook, the cell and the error."""

    def __init__(self, message: str, notebook: str = "", cell: int | None = None, output: str = ""):
        super().__init__(message)
        self.notebook, self.cell, self.output = notebook, cell, output


def title(nb: Path) -> str:
    """The notebook's first markdown heading (its title), or its file name (also for a file that is not a
    notebook)."""
    try:
        cells = _cells(nb)
    except ParameterError:
        return Path(nb).stem
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return Path(nb).stem


def question(nb: Path) -> str:
    """What ``nb`` answers: :data:`QUESTIONS`, else its title."""
    return QUESTIONS.get(Path(nb).stem) or title(nb)


_ADDED_TAGS = ("injected-parameters", "papermill-error-cell-tag", "studykit-setup")  # cells added to the executed copy


def _failed_cell(out: Path) -> tuple[int | None, int, str]:
    """(1-based cell number in the *source* notebook, its number of cells, first source line) of the failing cell.

    The executed copy marks the cell that raised (``metadata.papermill.exception``); a cell that timed out or
    killed its kernel is the last one papermill started (``start_time``). The cells papermill added (injected
    parameters, error banners) are not counted, so the number matches the notebook you edit (``None`` where
    the failing cell is one of those, or there is no executed copy).
    """
    try:
        cells = json.loads(out.read_text(encoding="utf-8"))["cells"]
        numbered, n = [], 0
        for c in cells:
            added = bool(set(c.get("metadata", {}).get("tags", [])) & set(_ADDED_TAGS))
            n += not added
            numbered.append((None if added else n, c, c.get("metadata", {}).get("papermill", {})))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, 0, ""
    hit = (next((x for x in numbered if x[2].get("exception")), None)
           or next((x for x in reversed(numbered) if x[2].get("start_time")), None))
    if hit is None:
        return None, n, ""
    source = "".join(hit[1].get("source", "")).strip()
    return hit[0], n, (source.splitlines()[0] if source else "")


def _failure(nb: Path, out: Path, what: str, exec_count=None) -> NotebookFailed:
    """:class:`NotebookFailed` for ``nb``, naming the failing cell of its executed copy ``out`` and ``what``."""
    cell, n_cells, first = _failed_cell(out)
    where = (f"cell {cell} of {n_cells}" if cell else "the parameters cell papermill injected" if first
             else "before its first cell")
    prompt = f"In [{exec_count}]: {first!r}" if exec_count is not None else repr(first)
    return NotebookFailed(f"notebook {nb.name} failed in {where} ({prompt}): {what}; executed copy: {out}",
                          notebook=nb.stem, cell=cell, output=str(out))


def run_one(nb: Path, parameters: dict, out_dir: Path, html_copy: bool = True, timeout_s: int = 1800) -> dict:
    """Execute one notebook; returns a summary dict. Raises :class:`NotebookFailed` naming the cell (an
    exception, a cell that ran past ``timeout_s`` seconds, a kernel that died or did not start), or
    :class:`ParameterError` (before a kernel starts) for a parameter ``nb`` lacks or of the wrong type. The
    kernel's connection file goes to a private temporary folder, removed however the run ends (Ctrl-C too)."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from studykit.nbtools import jupyter_fix

    nb = Path(nb)
    if parameters:  # before a kernel starts (without any, a parameters cell that does not parse fails in the run)
        check_profile({nb.stem: parameters}, [nb], f"parameters of {nb.name}")
    jupyter_fix.apply()  # nbclient#312: an interact cell can otherwise wait for ever for its reply
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / nb.name
    t0 = time.perf_counter()
    # the kernel inherits the environment: a non-inline MPLBACKEND (tests set Agg) would leave no figures
    saved = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    private = tempfile.TemporaryDirectory(prefix="studykit-notebook-")
    saved_tmp, tempfile.tempdir = tempfile.tempdir, private.name  # jupyter_client's mkstemp connection file
    try:
        source = _with_setup_cell(nb, Path(private.name))
        pm.execute_notebook(str(source), str(out), parameters=parameters, cwd=str(nb.parent),
                            kernel_name="python3", progress_bar=False, execution_timeout=timeout_s)
    except pm.PapermillExecutionError as exc:
        raise _failure(nb, out, f"{exc.ename}: {exc.evalue} (the executed copy has the traceback)",
                       exc.exec_count) from None
    except CellTimeoutError:
        raise _failure(nb, out, f"timed out after {timeout_s} s (--timeout)") from None
    except DeadKernelError:
        raise _failure(nb, out, "the kernel died (out of memory, os._exit, a crash in native code)") from None
    except Exception as exc:  # a kernel that does not start, a notebook papermill cannot read, ...
        raise NotebookFailed(f"notebook {nb.name} could not run: {type(exc).__name__}: {exc}",
                             notebook=nb.stem, output=str(out)) from exc
    finally:
        tempfile.tempdir = saved_tmp
        private.cleanup()
        if saved is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = saved
    elapsed = time.perf_counter() - t0
    if html_copy:
        _to_html(out)
    return {"notebook": nb.stem, "title": title(nb), "question": question(nb), "output": out.name,
            "html": out.with_suffix(".html").name if html_copy else None, "seconds": round(elapsed, 2),
            "parameters": parameters, "status": "ok", "figures": len(images(out))}


def _with_setup_cell(nb: Path, folder: Path) -> Path:
    """A copy of ``nb`` in ``folder`` whose first cell runs :data:`studykit.nbtools.display.SETUP_SOURCE` (plain
    numbers, whole tables, short paths in warnings), its source hidden in the report; ``nb`` itself if it cannot
    be read as a notebook (papermill then says why)."""
    import nbformat

    from studykit.nbtools.display import SETUP_SOURCE

    try:
        book = nbformat.read(str(nb), as_version=4)
    except Exception:  # papermill reports an unreadable notebook itself
        return nb
    cell = nbformat.v4.new_code_cell(SETUP_SOURCE)
    cell.metadata.update({"tags": ["studykit-setup"], "jupyter": {"source_hidden": True}})
    if (book.nbformat, book.nbformat_minor) < (4, 5):  # cell ids came with nbformat 4.5
        cell.pop("id", None)
    book.cells.insert(0, cell)
    copy = folder / nb.name
    nbformat.write(book, str(copy))
    return copy


def _to_html(ipynb: Path) -> None:
    """The executed notebook as HTML; cells whose source is collapsed in Jupyter (``jupyter.source_hidden``,
    e.g. the tour's exercise answers) show only their output, as in JupyterLab."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(ipynb), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            cell.metadata.setdefault("transient", {})["remove_source"] = True  # honoured by nbconvert's templates
    body, _ = HTMLExporter().from_notebook_node(nb)
    ipynb.with_suffix(".html").write_text(body)


def images(ipynb: Path, limit: int | None = None) -> list[bytes]:
    """The PNG images (bytes) of an executed notebook's outputs, in cell order."""
    found: list[bytes] = []
    try:
        cells = json.loads(Path(ipynb).read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return found
    for cell in cells:
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                found.append(base64.b64decode("".join(png) if isinstance(png, list) else png))
                if limit is not None and len(found) >= limit:
                    return found
    return found


def thumbnail(png: bytes, size: tuple[int, int] = THUMB_PX) -> bytes:
    """A smaller PNG (Pillow, which matplotlib brings); the image itself where Pillow is missing."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - matplotlib depends on Pillow
        return png
    im = Image.open(io.BytesIO(png))
    im.thumbnail(size)
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def provenance() -> dict:
    """Where and with what the notebooks ran: :func:`studykit.measure.records.provenance` (the kit's one
    builder: host, versions, git commit, UTC time) plus the CPU count (the README table's footer) and
    the load average."""
    import torch

    from studykit.measure.records import loadavg_1m, provenance as record_provenance

    return record_provenance("cuda" if torch.cuda.is_available() else "cpu", cpu_count=os.cpu_count(),
                             loadavg_1m=loadavg_1m())


def write_summary(summaries: list[dict], out_dir: Path, profile: str, prov: dict | None = None) -> Path:
    """``summary.json``: one entry per notebook run (ok or failed), the profile and provenance."""
    path = out_dir / "summary.json"
    path.write_text(json.dumps({"profile": str(profile), "provenance": prov or provenance(),
                                "notebooks": summaries}, indent=2, default=str))
    return path


def _thumbs_html(out_dir: Path, s: dict) -> str:
    if s.get("status") != "ok":
        return ""
    imgs = images(out_dir / s["output"], THUMBNAILS)
    target = s.get("html") or s["output"]
    return "".join(f"<a href='{html.escape(target)}'><img class='thumb' alt='{html.escape(s['notebook'])} figure "
                   f"{i + 1}' src='data:image/png;base64,{base64.b64encode(thumbnail(png)).decode()}'></a>"
                   for i, png in enumerate(imgs))


def write_index(summaries: list[dict], out_dir: Path, profile: str, prov: dict | None = None) -> Path:
    """``index.html``: per notebook, links to the executed HTML and ipynb, its parameters, run time, status,
    and thumbnails of its first figures (embedded, so the page stands alone)."""
    prov = prov or {}
    rows = []
    for s in summaries:
        links = [f"<a href='{html.escape(s['html'])}'>HTML</a>"] if s.get("html") else []
        links.append(f"<a href='{html.escape(s['output'])}'>ipynb</a>")
        params = "".join(f"<li><code>{html.escape(k)}</code> = <code>{html.escape(json.dumps(v))}</code></li>"
                         for k, v in s.get("parameters", {}).items()) or "<li>(notebook defaults)</li>"
        status = ("ok" if s.get("status") == "ok"
                  else f"<span class='failed'>FAILED</span>: {html.escape(s.get('error', ''))}")
        rows.append(
            f"<tr id='{html.escape(s['notebook'])}'><td><b>{html.escape(s['notebook'])}</b><br>"
            f"<small>{html.escape(s.get('question', ''))}</small><br>{' · '.join(links)}</td>"
            f"<td class='num'>{s['seconds']:.1f}</td><td>{status}</td><td><ul>{params}</ul></td>"
            f"<td class='figs'>{_thumbs_html(out_dir, s)}</td></tr>")
    total = sum(s["seconds"] for s in summaries)
    meta = ", ".join(f"{k}: {html.escape(str(prov[k])[:12] if k == 'git_commit' else str(prov[k]))}"
                     for k in ("host", "git_commit", "torch", "gpu", "timestamp") if prov.get(k))
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>studykit reports</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:6px;vertical-align:top}td.num{text-align:right}"
        "td.figs{white-space:nowrap}img.thumb{max-width:320px;max-height:220px;margin:2px;border:1px solid #ddd}.failed{color:#b00;font-weight:bold}"
        "ul{margin:0;padding-left:1.2em}</style></head><body>"
        f"<h1>studykit reports</h1><p>profile: <code>{html.escape(str(profile))}</code>; "
        f"{len(summaries)} notebooks, {total:.1f} s in all; {meta}. "
        "Data: <a href='summary.json'>summary.json</a>.</p>"
        "<table><tr><th>notebook</th><th>run time (s)</th><th>status</th><th>parameters</th>"
        f"<th>key figures</th></tr>{''.join(rows)}</table></body></html>")
    index = out_dir / "index.html"
    index.write_text(page)
    return index


class DirtyTreeError(ValueError):
    """A summary.json from a working tree with uncommitted changes: its timings name no commit."""


def markdown_table(summary: dict | Path | str, allow_dirty: bool = False) -> str:
    """The README's notebook table from a ``summary.json`` (or its loaded dict). A run from a working
    tree with uncommitted changes is refused (its footer would name a commit the notebooks did not run
    at) unless ``allow_dirty``, which marks it in the footer. A file that is not such a summary raises
    ``ValueError`` naming it."""
    where = "summary"
    if not isinstance(summary, dict):
        where = str(summary)
        try:
            summary = json.loads(Path(summary).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{where}: cannot be read as a summary.json ({type(exc).__name__}: {exc})") from None
    entries = summary.get("notebooks") if isinstance(summary, dict) else None
    if (not isinstance(entries, list) or not isinstance(summary.get("provenance", {}), dict)
            or not all(isinstance(s, dict) and isinstance(s.get("notebook"), str)
                       and (s.get("status") != "ok" or isinstance(s.get("seconds"), (int, float))) for s in entries)):
        raise ValueError(f"{where}: not a summary.json written by `python -m studykit notebooks` (expected "
                         "{'notebooks': [{'notebook': name, 'status': 'ok', 'seconds': number, ...}, ...], "
                         "'provenance': {...}})")
    dirty = bool(summary.get("provenance", {}).get("git_dirty"))
    if dirty and not allow_dirty:
        raise DirtyTreeError("the notebooks ran in a working tree with uncommitted changes, so the table's footer "
                             "would name no commit they ran at: commit (or stash) the changes, rerun `python -m "
                             "studykit notebooks --params params/smoke.yaml`, then print the table; "
                             "--allow-dirty prints it marked 'with local changes' (not for the README)")
    lines = ["| notebook | the question it answers | smoke run (s) |", "|---|---|---:|"]
    for s in summary["notebooks"]:
        secs = f"{s['seconds']:.1f}" if s.get("status") == "ok" else "failed"
        q = str(s.get("question", "")).replace("|", "\\|")
        lines.append(f"| [`{s['notebook']}`](notebooks/{s['notebook']}.ipynb) | {q} | {secs} |")
    prov = summary.get("provenance", {})
    lines.append("")
    lines.append(f"<sub>profile `{summary.get('profile')}`, {prov.get('cpu_count', '?')} CPU cores, torch "
                 f"{prov.get('torch', '?')}, commit {str(prov.get('git_commit') or '?')[:10]}"
                 f"{' with local changes' if prov.get('git_dirty') else ''}, "
                 f"{prov.get('timestamp', '?')}</sub>")
    return "\n".join(lines)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that a killed run cleans up as an interrupted one."""


def _terminate(signum, frame):
    raise Terminated(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit notebooks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=str(paths.PARAMS / "smoke.yaml"), help="profile YAML (default: smoke)")
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME", help="notebook names to run (default: all)")
    ap.add_argument("--out", default=str(paths.REPORTS), help="output folder (default: reports/)")
    ap.add_argument("--notebooks-dir", default=str(paths.NOTEBOOKS), help="folder of notebooks (default: notebooks/)")
    ap.add_argument("--no-html", action="store_true", help="skip the HTML copies")
    ap.add_argument("--keep-going", action="store_true", help="run the remaining notebooks after a failure")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out inside the repository's committed notebooks/ or data/ (refused otherwise)")
    ap.add_argument("--timeout", type=argtypes.positive_int, default=1800, help="seconds per cell before a notebook fails")
    ap.add_argument("--table", nargs="?", const="", default=None, metavar="SUMMARY_JSON",
                    help="print the README's markdown table from SUMMARY_JSON (default: <out>/summary.json); "
                         "runs nothing; refuses a run from a working tree with uncommitted changes")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="with --table: print it for a run from a dirty working tree, marked 'with local changes'")
    args = ap.parse_args((argv or [])[1:] if argv and argv[0] == "notebooks" else argv)

    out_dir = Path(args.out)
    if args.table is not None:
        src = Path(args.table) if args.table else out_dir / "summary.json"
        if not src.exists():
            print(f"no {src}: run `python -m studykit notebooks --params params/smoke.yaml` first", file=sys.stderr)
            return 2
        try:
            print(markdown_table(src, allow_dirty=args.allow_dirty))
        except ValueError as exc:  # a dirty tree, a file that is not a summary.json
            print(f"python -m studykit notebooks --table: {exc}", file=sys.stderr)
            return 2
        return 0

    try:
        paths.check_writable_output(out_dir, args.overwrite_committed)
    except paths.OutputError as exc:
        ap.error(str(exc))
    nb_dir = Path(args.notebooks_dir)
    out_abs, nb_abs = out_dir.expanduser().resolve(), nb_dir.expanduser().resolve()
    if out_abs.is_relative_to(nb_abs) or nb_abs.is_relative_to(out_abs):
        ap.error(f"--out {out_dir} and --notebooks-dir {nb_dir} overlap: the executed copies would overwrite or "
                 f"sit among the source notebooks; give an --out that is neither inside nor above {nb_dir} "
                 "(default: reports/)")
    nbs = discover(nb_dir) if nb_dir.is_dir() else []
    if not nbs:  # a misspelt folder must not replace summary.json with an empty one
        ap.error(f"--notebooks-dir {nb_dir}: no notebooks (*.ipynb) there")
    try:
        profile = load_profile(args.params)
        check_profile(profile, nbs, args.params)
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    if args.only:
        known = {p.stem for p in nbs}
        bad = sorted(set(args.only) - known)
        if bad:
            print(f"unknown notebook(s) {bad}; available: {', '.join(sorted(known))}", file=sys.stderr)
            return 2
        nbs = [p for p in nbs if p.stem in args.only]
    from tqdm.auto import tqdm

    prov = provenance()
    summaries: list[dict] = []
    failures: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    bar = tqdm(nbs, desc="notebooks", unit="nb")
    nb = nbs[0]
    on_main = threading.current_thread() is threading.main_thread()  # signal handlers: main thread only
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main else None
    try:
        for nb in bar:
            bar.set_postfix_str(nb.stem)
            t0 = time.perf_counter()
            try:
                summaries.append(run_one(nb, profile.get(nb.stem, {}), out_dir, html_copy=not args.no_html,
                                         timeout_s=args.timeout))
            except NotebookFailed as exc:
                bar.write(f"studykit notebooks: {exc}", file=sys.stderr)
                failures.append(str(exc))
                summaries.append({"notebook": nb.stem, "title": title(nb), "question": question(nb),
                                  "output": nb.name, "html": None, "seconds": round(time.perf_counter() - t0, 2),
                                  "parameters": profile.get(nb.stem, {}), "status": "failed", "error": str(exc),
                                  "failed_cell": exc.cell, "figures": 0})
                if not args.keep_going:
                    break
        bar.close()
        write_summary(summaries, out_dir, args.params, prov)
        index = write_index(summaries, out_dir, args.params, prov)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (_terminate); run_one has removed its temporary files
        bar.close()
        print(f"python -m studykit notebooks: interrupted while running {nb.stem} ({len(summaries)} of {len(nbs)} "
              f"notebooks done); summary.json and index.html were not updated; executed copies so far are in "
              f"{out_dir}", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    ok = sum(s["status"] == "ok" for s in summaries)
    print(f"ran {ok}/{len(nbs)} notebooks in {sum(s['seconds'] for s in summaries):.1f} s; index: {index}")
    if failures:
        print(f"{len(failures)} failed:\n" + "\n".join(f"  {f}" for f in failures), file=sys.stderr)
        return 1
    return 0
