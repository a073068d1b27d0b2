"""``python -m studykit bench``: compressors against the memory floor, DDP hooks against PyTorch's.

The command, its options and its records are described in :mod:`studykit.measure.bench.cli`
(``python -m studykit bench --help``). Modules, by job:

* ``calls``: how one call is timed and profiled (:class:`RepPolicy`, :func:`kernel_times`);
* ``codecs``: the codec part, every codec timed beside the memory floor (:func:`run_codecs`) and its
  kernels counted (:func:`count_kernels`, :func:`attach_kernels`);
* ``targets``: the speed targets (:data:`SPEED_TARGETS`, :data:`AGREE_TOL`, :data:`TARGETS`);
* ``summary``: one row per measured configuration, judged against the targets (:func:`summarize`);
* ``compare``: one or two runs side by side and their target verdicts (:func:`compare_runs`,
  :func:`speed_targets`);
* ``scripts``: what the benchmark scripts share (policy and output options, their records and reports);
* ``cli``: the command (:func:`main`).

Every public name, and every other name used outside the package, is re-exported here (``bench.NAME``). A name
is looked up in the module that uses it: to replace one (a test's ``monkeypatch``), patch it there
(``bench.calls.time_fn``, ``bench.codecs._kernels``).
"""
from studykit.measure.bench.calls import RepPolicy
from studykit.measure.bench.cli import main
from studykit.measure.bench.codecs import ELEMENTWISE, PHASES, TOPK_FAMILY, attach_kernels, count_kernels, run_codecs
from studykit.measure.bench.compare import (compare_markdown, compare_runs, speed_targets, speed_targets_markdown,
                                            split_repeats)
from studykit.measure.bench.scripts import (json_output_from_args, records_line, records_of, start, write_json,
                                            write_report)
from studykit.measure.bench.summary import summarize
from studykit.measure.bench.targets import AGREE_TOL, SPEED_TARGETS, TARGETS, SpeedTarget

# outside __all__ but reached as bench.NAME by the benchmark scripts and tests: the modules' other names, and
# those bench's code takes from the measure modules
from studykit.measure.bench.calls import (BUDGET_S, _fast_paths, _host_ms, _kernels, _settle, _time,  # noqa: F401
                                          capture_call, kernel_times, policy_text, split_calls)
from studykit.measure.bench.cli import DDP_MODELS, DDP_SPECS, build_parser  # noqa: F401
from studykit.measure.bench.codecs import (FAST_CODECS, FLOOR_COPY_BYTES, LOW_RANK, RAW_TIMES_MAX,  # noqa: F401
                                           codec_inputs, encdec_call)
from studykit.measure.bench.scripts import (add_candidates_args, add_json_output_args, add_output_args,  # noqa: F401
                                            add_policy_args, candidates_gpu, candidates_report_only, output_from_args,
                                            policy_from_args, start_candidates)
from studykit.measure.bench.summary import _params_str, summary_markdown  # noqa: F401
from studykit.measure.bench.targets import TARGET_MODEL  # noqa: F401
from studykit.measure.profile import effective_params  # noqa: F401
from studykit.measure.records import RecordError  # noqa: F401
from studykit.measure.runtime import CompressorSpec  # noqa: F401
from studykit.measure.timing import L2_FLUSH_BYTES, time_fn  # noqa: F401

__all__ = ["TARGETS", "ELEMENTWISE", "TOPK_FAMILY", "PHASES", "RepPolicy", "SpeedTarget", "SPEED_TARGETS",
           "AGREE_TOL", "attach_kernels", "count_kernels", "summarize", "run_codecs", "split_repeats", "compare_runs",
           "compare_markdown", "speed_targets", "speed_targets_markdown", "start", "records_of", "records_line",
           "write_report", "add_json_output_args", "json_output_from_args", "write_json", "main"]
