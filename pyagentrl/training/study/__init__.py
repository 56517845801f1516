"""A study: arms (estimator x anchors) trained with identical settings over several seeds and task families, each
run scored on held-out tasks, then one report (curves with bands over seeds, a table with intervals, anchor
statistics, wall-clock and versions). `spec` reads and checks a spec, `runner` runs and records the runs, `records`
reads and writes their records, `report` renders the report.

A spec (YAML) names the shared train config, the seeds, the held-out tasks, and the overrides of each family and
each arm::

    name: frozenlake
    config: estimators-base.yaml         # relative to the spec (train/studies/)
    seeds: [1, 2, 3]
    eval_tasks: 64
    keep: model                          # what a scored run keeps: model (default) or checkpoints
    families:
      frozenlake: {env.name: frozenlake}
    arms:
      grpo: {algorithm.estimator: grpo}
      gigpo-exact: {algorithm.estimator: gigpo, anchors.mode: exact}

Each run is a ``pyagentrl train`` subprocess (an engine such as vLLM holds one model per process) writing
``<output>/<family>/<arm>/seed<k>/run-<time>/`` (checkpoints: gigabytes, kept out of the repository). The report
directory ``<report>`` is an argument of `run_study` and `write_report` (``pyagentrl study`` defaults it to
``docs/study/<name>``). Once scored, a run leaves its record in ``<report>/results/<family>/<arm>/seed<k>/``:
``done.json`` (the held-out evaluation with each task's outcome), ``metrics.jsonl`` and ``config.yaml``, a few
kilobytes meant to be committed. Beside them, ``<report>/baselines.json`` holds each family's baselines on the same
held-out tasks (``pyagentrl baselines ... --out <report>/baselines.json --key <family>``: a random mover, the best
blind sequence chosen on other task seeds, the untrained policy); a family without one gets the first two computed
for the report. The report is rebuilt from the records alone, and a run with a record is never run again, so a study
outlives the machine that ran its first runs. A run that was interrupted resumes from its latest checkpoint (``train
--resume``), so a killed study continues where it stopped. Once scored, a run keeps (``keep: model``, the default)
only its last checkpoint's weights, config and evaluation: the DeepSpeed optimizer states and the earlier
checkpoints are about 90 % of a run's disk (4.6 of 5.1 GB with the embedded model), and a study of dozens of runs
would fill a disk with them. ``keep: checkpoints`` keeps everything the trainer kept.
"""

from pyagentrl.training.study.records import BASELINES, DONE, BrokenRecord, read_result
from pyagentrl.training.study.report import family_baselines, write_report
from pyagentrl.training.study.runner import RunFailed, run_arm, run_study
from pyagentrl.training.study.spec import StudySpec, load_spec

__all__ = [
    "BASELINES",
    "DONE",
    "BrokenRecord",
    "RunFailed",
    "StudySpec",
    "family_baselines",
    "load_spec",
    "read_result",
    "run_arm",
    "run_study",
    "write_report",
]
