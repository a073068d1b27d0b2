"""Where does a DDP comm hook's iteration go, bucket by bucket? One configuration's measured time line beside the
model's.

    python benchmarks/hook_timeline.py FOLDER [--model bert_base] [--compressor powersgd] [--rank 4] [--rate 10]
                                       [--gpus P] [--calibration NAME] [--write | --out DIR]
    python benchmarks/hook_timeline.py data/measurements/bandwidth/h200_p2r --write   # docs/figures/hook_timeline.*

FOLDER holds a ``ddp.jsonl`` with ``hook_times`` records (``python -m studykit ddp --hook-times``): the kit's
overlapped hook stamped bucket by bucket on the device and the host (:mod:`studykit.measure.hook_times`). The
script picks the one configuration the options name (model, compressor spec, ``--rank``, link rate, GPUs), reads
its stamps (``hook_timeline_table``, ``hook_host_table``) and prices the same configuration as ``verify`` does:
the options of a committed verification entry of ``data/campaigns.toml`` (``--calibration``; by default FOLDER's
own host-chain entry, else :data:`DEFAULT_CALIBRATION`) applied to FOLDER's records, so the calibration leaves
the scored record's rate out. The model's per-bucket moments come from the same prediction (``verify --timelines``:
``buckets`` of ``studykit.perfmodel.model.bucket_timeline_s``).

It prints per bucket the measured and predicted end of the decode and of the host's work (ms since the start of
the backward pass), then the end of the backward pass, ``T_obs`` and the iteration, measured and predicted, with
their ratio. ``--write`` saves the figure (:func:`studykit.plots.measure.hook_timeline`) and the table as
``docs/figures/hook_timeline.png`` and ``.md``; ``--out DIR`` writes them to DIR instead.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from studykit.compressors.registry import parse_spec, setting_label  # noqa: E402

#: the host-chain calibration used where FOLDER has none of its own: BERT-base's hooks priced bucket by bucket
DEFAULT_CALIBRATION = "verification/bandwidth/h200_p2n/buckets/gamma1"
FIGURES = ROOT / "docs" / "figures"
NAME = "hook_timeline"


# ------------------------------------------------------------------ the configuration
def _rate(r: dict):
    n = r.get("network")
    return float(n["rate_gbps"]) if isinstance(n, dict) and n.get("rate_gbps") is not None else None


def _describe(r: dict) -> str:
    rate = _rate(r)
    return (f"{r['model']} b{r['batch_size']}, {setting_label(r['compressor'], r.get('params') or {}, 'short')}, "
            f"{'native link' if rate is None else f'{rate:g} Gbit/s'}, {r['world_size']} GPUs")


def pick(records, model: str, compressor: str, params: dict, rate: float | None, gpus: int | None) -> tuple[dict, dict]:
    """The ``hook_times`` record (ok, overlapped hook) of the named configuration and the unstamped ``ddp`` record of
    the same configuration; ``SystemExit`` naming what was asked and what the records hold where not exactly one."""
    stamped = [r for r in records if r.get("kind") == "hook_times" and r.get("status") == "ok"
               and r.get("hook_overlap") is not False]
    want = [r for r in stamped if r.get("model") == model and r.get("compressor") == compressor
            and all((r.get("params") or {}).get(k) == v for k, v in params.items())
            and (rate is None or _rate(r) == float(rate)) and (gpus is None or r.get("world_size") == gpus)]
    asked = (f"{model}, {setting_label(compressor, params, 'kv')}, "
             f"{'any rate' if rate is None else f'{rate:g} Gbit/s'}, {'any' if gpus is None else gpus} GPUs")
    held = "; ".join(sorted({_describe(r) for r in stamped})) or "none"
    if len(want) != 1:
        raise SystemExit(f"hook_timeline: {'no hook_times record' if not want else f'{len(want)} hook_times records'} for {asked} "
                         f"(one wanted: name the compressor's parameters, --rate or --gpus); recorded: {held}")
    h = want[0]
    same = {**json.loads(h["config_id"]), "kind": "ddp"}
    ddp = [r for r in records if r.get("kind") == "ddp" and r.get("status") == "ok"
           and json.loads(r["config_id"]) == same]
    if not ddp:
        raise SystemExit(f"hook_timeline: no ddp record of {_describe(h)} beside its hook_times record (the model "
                         "predicts the unstamped iteration)")
    return h, ddp[-1]


def measured_frame(h: dict) -> pd.DataFrame:
    """One row per bucket (:data:`studykit.plots.measure.HOOK_TIMELINE_COLUMNS`, the host chain and the decode end's
    quartiles over the stamped iterations) from a ``hook_times`` record."""
    from studykit.measure.hook_times import hook_host_table, hook_timeline_table

    dev, host = hook_timeline_table([h]), hook_host_table([h])
    sent = dev["encode_end_ms"] + dev["comm_ms"]  # the first collective's issue plus the collectives' durations
    t = pd.DataFrame({"bucket": dev["bucket"], "bucket_bytes": dev["bucket_bytes"], "ready_ms": dev["ready_ms"],
                      "encode_end_ms": dev["encode_end_ms"], "comm_start_ms": dev["encode_end_ms"],
                      "comm_end_ms": sent, "decode_start_ms": sent, "decode_end_ms": dev["decode_end_ms"],
                      "backward_end_ms": dev["backward_end_ms"]})
    if len(host) == len(t):
        t["host_ready_ms"] = host["ready_host_ms"].to_numpy()
        t["host_start_ms"] = (host["ready_host_ms"] + host["wait_ms"]).to_numpy()
        t["host_done_ms"] = host["done_host_ms"].to_numpy()
    per_iter = (h.get("stamps_ms") or {}).get("decode_end_ms")
    if per_iter:  # iterations x buckets, in bucket index order as the table
        a = np.array([[np.nan if x is None else x for x in it] for it in per_iter], dtype=float)
        t["decode_end_q25_ms"], t["decode_end_q75_ms"] = np.nanpercentile(a, [25, 75], axis=0)
    return t


# ------------------------------------------------------------------ the model's side: verify's prediction
def calibration_for(folder: Path, manifest) -> str:
    """FOLDER's own current verification entry that prices hooks on the host chain (``--encode-decode-from
    buckets``), else :data:`DEFAULT_CALIBRATION`."""
    for name, e in manifest.entries.items():
        g = e.generator or {}
        args = list(g.get("args", ()))
        if (g.get("kind") == "verify" and e.status == "current" and len(g["records"]) == 1
                and (ROOT / g["records"][0]).resolve() == folder.resolve()
                and "--encode-decode-from" in args and args[args.index("--encode-decode-from") + 1] == "buckets"):
            return name
    return DEFAULT_CALIBRATION


def predicted(folder: Path, ddp: dict, calibration: str) -> tuple[dict, pd.DataFrame]:
    """``verify``'s extended row for the ``ddp`` record (the options of the manifest entry ``calibration`` on
    FOLDER's records) and the same prediction's per-bucket moments (``verify --timelines``)."""
    from studykit.nbtools import datacli
    from studykit.perfmodel.verify import cli
    from studykit.perfmodel.verify.files import read_predictions

    manifest = datacli.load_manifest()
    if calibration not in manifest.entries:
        raise SystemExit(f"hook_timeline: --calibration {calibration!r}: no campaign of that name in "
                         f"data/campaigns.toml (e.g. {DEFAULT_CALIBRATION})")
    try:
        args = datacli.verify_args(manifest.entries[calibration], records=False)
    except ValueError as exc:
        raise SystemExit(f"hook_timeline: --calibration {calibration!r}: {exc} (name a verification entry, "
                         f"e.g. {DEFAULT_CALIBRATION})") from None
    if "--overlap" not in args or args[args.index("--overlap") + 1] != "timeline":
        raise SystemExit(f"hook_timeline: {calibration} prices hooks without the per-bucket timeline "
                         "(its verify options lack --overlap timeline): no per-bucket moments to draw")
    with tempfile.TemporaryDirectory() as tmp:
        if cli.main(["--records", str(folder), *args, "--timelines", "--out", tmp, "--quiet"]) != 0:
            raise SystemExit(f"hook_timeline: verify with the options of {calibration} failed on {folder}")
        rows = read_predictions(tmp)
        tl = pd.read_csv(Path(tmp) / "timelines.csv")
    tl = tl[(tl["config_id"] == ddp["config_id"]) & (tl["variant"] == "extended")].sort_values("bucket")
    if tl.empty:
        raise SystemExit(f"hook_timeline: verify priced no per-bucket timeline for this record with the options of "
                         f"{calibration}")
    row = rows[(rows["config"] == tl["config"].iloc[0]) & (rows["variant"] == "extended")]
    if len(row) != 1:
        raise SystemExit(f"hook_timeline: verify scored no extended row for {tl['config'].iloc[0]} with the options "
                         f"of {calibration}")
    t = tl.drop(columns=["platform", "variant", "config", "config_id"]).reset_index(drop=True)
    t["backward_end_ms"] = t["ready_ms"].iloc[-1]  # the last bucket is ready when the backward pass ends
    return row.iloc[0].to_dict(), t


# ------------------------------------------------------------------ the table, the figure and the page
def build(folder: str | Path, model: str = "bert_base", compressor: str = "powersgd:rank=4", rank: int | None = None,
          rate: float | None = 10.0, gpus: int | None = None, calibration: str | None = None) -> dict:
    """Everything the script prints and writes for one configuration: the records, the per-bucket table
    (``buckets``), the iteration's numbers, the figure and the calibration's name."""
    from studykit.measure.records import load_records
    from studykit.nbtools import datacli
    from studykit.plots.measure import hook_timeline

    folder = Path(folder)
    if not (folder / "ddp.jsonl").is_file():
        raise SystemExit(f"hook_timeline: {folder} has no ddp.jsonl (a folder of `python -m studykit ddp "
                         "--hook-times` records)")
    name, params = parse_spec(compressor)
    if rank is not None:
        params["rank"] = int(rank)
    records = load_records(folder / "ddp.jsonl", quiet=True)
    h, ddp = pick(records, model, name, params, rate, gpus)
    calibration = calibration or calibration_for(folder, datacli.load_manifest())
    row, model_t = predicted(folder, ddp, calibration)
    meas_t = measured_frame(h)
    if len(model_t) != len(meas_t):
        raise SystemExit(f"hook_timeline: the model has {len(model_t)} DDP buckets, the record {len(meas_t)}: "
                         "no bucket-by-bucket comparison")
    host = "host_done_ms" in meas_t and "host_done_ms" in model_t
    nan = np.full(len(meas_t), np.nan)
    table = pd.DataFrame({"bucket": meas_t["bucket"].to_numpy(), "size_mib": meas_t["bucket_bytes"].to_numpy() / 2**20,
                          "decode_end_measured_ms": meas_t["decode_end_ms"].to_numpy(),
                          "decode_end_model_ms": model_t["decode_end_ms"].to_numpy(),
                          "host_done_measured_ms": meas_t["host_done_ms"].to_numpy() if host else nan,
                          "host_done_model_ms": model_t["host_done_ms"].to_numpy() if host else nan})
    context = _describe(h)
    fig, _ = hook_timeline(meas_t, model_t, context=context, n_iter=h.get("n_iter"),
                           model_name="model (bucket_timeline_s)")
    return {"stamped": h, "ddp": ddp, "measured": meas_t, "model": model_t, "buckets": table, "figure": fig,
            "context": context, "calibration": calibration, "calibrated_on": row.get("calibrated_on"),
            "measured_backward_end_ms": float(h["backward_end_ms"]),
            "predicted_backward_end_ms": float(model_t["backward_end_ms"].iloc[0]),
            "measured_sync_end_ms": float(h["sync_end_ms"]), "predicted_t_obs_ms": float(row["t_obs_ms"]),
            "measured_iteration_ms": float(ddp["ms_median"]), "stamped_iteration_ms": float(h["iteration_ms"]),
            "predicted_iteration_ms": float(row["predicted_ms"]),
            "ratio": float(row["predicted_ms"]) / float(ddp["ms_median"])}


def table_markdown(res: dict) -> str:
    """The per-bucket table and the iteration's, Markdown (ms, one decimal)."""
    f = lambda x: "—" if x is None or not np.isfinite(x) else f"{x:.1f}"  # noqa: E731
    lines = ["| bucket | size (MiB) | decode end, measured (ms) | decode end, model (ms) | host done, measured (ms) | "
             "host done, model (ms) |", "|---:|---:|---:|---:|---:|---:|"]
    for r in res["buckets"].itertuples():
        lines.append(f"| {r.bucket} | {f(r.size_mib)} | {f(r.decode_end_measured_ms)} | {f(r.decode_end_model_ms)} | "
                     f"{f(r.host_done_measured_ms)} | {f(r.host_done_model_ms)} |")
    lines += ["", "| moment | measured (ms) | model (ms) | model / measured |", "|---|---:|---:|---:|"]
    for what, m, p in (("end of the backward pass", res["measured_backward_end_ms"], res["predicted_backward_end_ms"]),
                       ("loss.backward() returns (T_obs)", res["measured_sync_end_ms"], res["predicted_t_obs_ms"]),
                       ("iteration", res["measured_iteration_ms"], res["predicted_iteration_ms"])):
        lines.append(f"| {what} | {f(m)} | {f(p)} | {p / m:.2f} |")
    lines.append(f"| iteration, stamped (`hook_times`, with the stamps' own overhead) | {f(res['stamped_iteration_ms'])} "
                 "| | |")
    return "\n".join(lines) + "\n"


def reading(res: dict) -> str:
    """What the figure shows, in words, from the numbers (the host-bound case or not)."""
    m, p = res["measured"], res["model"]
    bwd, dev_end = res["measured_backward_end_ms"], float(m["decode_end_ms"].max())
    out = []
    if "host_done_ms" in m:
        host_end = float(m["host_done_ms"].max())
        wait = m["host_start_ms"] - m["host_ready_ms"]
        if host_end >= dev_end:
            out.append(f"The measured hook is host-bound: the communication thread, one bucket after the other, ends "
                       f"its work at {host_end:.1f} ms, after the device's last decode ({dev_end:.1f} ms) and "
                       f"{host_end - bwd:.1f} ms after the backward pass ends ({bwd:.1f} ms). The buckets queue for the "
                       f"thread (up to {float(wait.max()):.1f} ms) and a bucket's collectives start only once the "
                       "thread has issued them, so what ends after the backward pass is paced by host work.")
        else:
            out.append(f"The measured hook is device-bound: its last decode ends at {dev_end:.1f} ms, after the "
                       f"communication thread's work ({host_end:.1f} ms); the backward pass ends at {bwd:.1f} ms.")
    else:
        out.append(f"The record holds no host stamps; the last decode ends at {dev_end:.1f} ms, the backward pass "
                   f"at {bwd:.1f} ms.")
    if "host_done_ms" in p:
        out.append(f"The model's host chain (`bucket_timeline_s`) ends at {float(p['host_done_ms'].max()):.1f} ms and "
                   f"its last decode at {float(p['decode_end_ms'].max()):.1f} ms.")
        if "host_done_ms" in m:
            per = lambda t: float((t["host_done_ms"] - t["host_start_ms"]).median())  # noqa: E731
            out.append(f"Per bucket, the thread's work takes a median of {per(m):.1f} ms in the run and {per(p):.1f} ms "
                       "in the model, whose host times come from `profile --bucket-times` (the protocol timed "
                       "bucket by bucket outside DDP).")
    t_obs, synced = res["predicted_t_obs_ms"], res["measured_sync_end_ms"]
    rest_model, rest_run = res["predicted_iteration_ms"] - t_obs, res["stamped_iteration_ms"] - synced
    out.append(f"The model's T_obs is {t_obs:.1f} ms against {synced:.1f} ms until `loss.backward()` returned; the rest "
               f"of its iteration (O and the path overhead) is {rest_model:.1f} ms against {rest_run:.1f} ms in the "
               f"stamped iteration. It predicts the iteration at {res['predicted_iteration_ms']:.1f} ms against "
               f"{res['measured_iteration_ms']:.1f} ms measured (model / measured {res['ratio']:.2f})")
    if abs(t_obs / synced - 1) > 0.1 and abs(res["ratio"] - 1) < 0.05:
        out[-1] += (": the iteration agrees because the path overhead, a residual fitted on the calibration records, "
                    "makes up for a T_obs that is off")
    out[-1] += "."
    return " ".join(out)


def page(res: dict, folder: Path, command: str) -> str:
    """``hook_timeline.md``: where the numbers come from, what the figure shows, the figure and the tables."""
    h = res["stamped"]
    where = _shown(folder)
    return "\n".join([
        "# The DDP hook's time line, measured beside the model's", "",
        f"Generated by `{command}`; do not edit by hand.", "",
        f"- **Records:** `{where}/ddp.jsonl`: the `hook_times` record and the unstamped `ddp` record of "
        f"{res['context']} (the kit's overlapped hook), on {h['world_size']} x {h.get('gpu')} (host `{h.get('host')}`, "
        f"torch {h.get('torch')}, NCCL {h.get('nccl')}), kit commit `{str(h.get('git_commit'))[:7]}`, "
        f"{h.get('timestamp')}; medians of {h.get('n_iter')} stamped iterations.",
        f"- **Model:** `python -m studykit verify` on these records with the options of `{res['calibration']}` "
        "(data/campaigns.toml), extended variant; the per-bucket moments are the same prediction's "
        f"(`bucket_timeline_s`). Calibrated on: {res['calibrated_on']}.",
        "- **Clocks:** device bars on the GPU's clock, host bars on the host's, each from the moment the backward "
        "pass starts on it.", "",
        f"**What it shows.** {reading(res)}", "",
        f"![{res['context']}: measured and predicted time line per DDP bucket]({NAME}.png)", "",
        table_markdown(res)])


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="a folder with ddp.jsonl holding hook_times records")
    ap.add_argument("--model", default="bert_base", help="model name as recorded (default bert_base)")
    ap.add_argument("--compressor", default="powersgd:rank=4",
                    help="compressor spec name:k=v; the record's parameters must include these (default powersgd:rank=4)")
    ap.add_argument("--rank", type=int, default=None, help="shorthand: sets the spec's rank parameter")
    ap.add_argument("--rate", type=float, default=10.0, help="emulated link rate (Gbit/s, as set; default 10)")
    ap.add_argument("--gpus", type=int, default=None, help="world size (default: the one recorded)")
    ap.add_argument("--calibration", default=None, metavar="NAME",
                    help="a verification entry of data/campaigns.toml whose verify options price the record "
                         f"(default: FOLDER's own host-chain entry, else {DEFAULT_CALIBRATION})")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--write", action="store_true", help=f"save {NAME}.png and {NAME}.md in docs/figures/")
    out.add_argument("--out", default=None, metavar="DIR", help=f"save {NAME}.png and {NAME}.md in DIR")
    a = ap.parse_args(argv)
    import matplotlib.pyplot as plt

    res = build(a.folder, a.model, a.compressor, a.rank, a.rate, a.gpus, a.calibration)
    try:
        print(f"{res['context']} ({_shown(Path(a.folder))}; model: {res['calibration']})\n")
        print(table_markdown(res))
        dest = FIGURES if a.write else (Path(a.out) if a.out else None)
        if dest is not None:
            dest.mkdir(parents=True, exist_ok=True)
            shown = [_shown(Path(a.folder)) if x == a.folder else x for x in argv]
            command = "python benchmarks/hook_timeline.py " + " ".join(shlex.quote(x) for x in shown)
            res["figure"].savefig(dest / f"{NAME}.png", dpi=110)
            (dest / f"{NAME}.md").write_text(page(res, Path(a.folder), command), encoding="utf-8")
            print(f"wrote {_shown(dest / (NAME + '.png'))} and {NAME}.md")
    finally:
        plt.close(res["figure"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
