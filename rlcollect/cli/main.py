"""The ``rlcollect`` command: argument parsing and dispatch to ``collect``, ``tune``, ``inspect`` and
``export``.

Every bad argument or input ends the same way: one line ``rlcollect: error: <what is wrong>`` on
stderr and exit status 2, never a traceback. A run stopped with Ctrl-C keeps the batches collected
so far and exits with 130.

Examples:
    >>> main(["--version"])
    rlcollect 0.1.0
    0
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import rlcollect
from rlcollect.cli.errors import CliError, one_line
from rlcollect.cli.signals import Stopped, StopSignals

# the commands import torch, tensordict and Gymnasium: only when they run (--help stays fast)

__all__ = ["build_parser", "main"]

_PREFIX = "rlcollect: error: "

_COLLECT_EPILOG = """\
The run folder holds a memory-mapped TensorDict of batch_size [batches, envs, time], read back with
rlcollect.load_run(OUT) (or tensordict.TensorDict.load_memmap(OUT, allow_pickle=False)), and run.json
describing the run. It grows batch by batch: a stopped run loads at its size. --policy names a factory
called as factory(observation_space, action_space) with the single env's Gymnasium spaces; it
returns an nn.Module or callable from observations [N, *obs] to actions [N, *act], or a TensorDict
policy. Modules in the current directory can be named.

example: rlcollect collect --env CartPole-v1 --frames 100000 --num-envs 8 --out runs/cartpole --seed 0
"""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr, exit status 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        words = message.removeprefix("unrecognized arguments:").split() if message.startswith(
            "unrecognized arguments:") else []
        env = next((word for word in words if re.search(r"-v\d+$", word)), None)  # an env id
        hint = f": an env is given as --env {env}" if env else ""
        self.exit(2, f"{_PREFIX}{one_line(message)}{hint} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _env_kwarg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as ``(key, value)``: the value a Python literal (``4``, ``0.25``, ``None``,
    ``(84, 84)``) where it reads as one, else the text itself (``rgb_array``).

    Examples:
        >>> _env_kwarg("frameskip=4"), _env_kwarg("render_mode=rgb_array")
        (('frameskip', 4), ('render_mode', 'rgb_array'))
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a keyword name, got {text!r}")
    try:
        parsed: Any = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parsed = value
    return key.strip(), parsed


def build_parser() -> argparse.ArgumentParser:
    """The ``rlcollect`` parser with its ``collect`` and ``inspect`` subcommands."""
    parser = _Parser(
        prog="rlcollect",
        description="Collect reinforcement-learning experience from Gymnasium envs.",
    )
    parser.add_argument("--version", action="version", version=f"rlcollect {rlcollect.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_collect(commands)
    _add_tune(commands)
    _add_inspect_and_export(commands)
    return parser


def _add_env_and_policy(command: argparse.ArgumentParser) -> None:
    """The env and policy arguments of ``collect`` and ``tune``."""
    command.add_argument("--env", default="CartPole-v1", help="Gymnasium env id (default: %(default)s)")
    command.add_argument("--env-kwargs", type=_env_kwarg, nargs="+", action="extend", default=[],
                         metavar="KEY=VALUE",
                         help="keyword arguments for gymnasium.make (VALUE read as a Python literal, "
                         "else kept as text), e.g. --env-kwargs frameskip=4 render_mode=rgb_array")
    command.add_argument("--policy", metavar="MODULE:FACTORY",
                         help="policy factory, e.g. my_pkg.policies:make_policy "
                         "(default: uniform random actions)")


def _add_collect(commands: Any) -> None:
    """The ``collect`` subcommand."""
    collect = commands.add_parser(
        "collect",
        help="run a collector and write its batches to a memmap folder",
        description="Run a Collector on a Gymnasium env and write every batch to a memory-mapped "
        "TensorDict folder.",
        epilog=_COLLECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_env_and_policy(collect)
    collect.add_argument("--frames", type=_positive_int, default=100_000,
                         help="frames to collect, summed over envs; rounded up to whole batches "
                         "(default: %(default)s)")
    collect.add_argument("--device", help="where the policy runs, e.g. cpu or cuda:0 (default: where "
                         "its parameters are); batches are stored from the CPU")
    collect.add_argument("--obs-dtype", choices=("float16", "float32", "float64"),
                         help="store floating-point observations in this dtype, and give them to the "
                         "policy so (e.g. float32 for MuJoCo's float64 observations); default: the env's")
    collect.add_argument("--info-keys", nargs="+", action="extend", default=[], metavar="KEY",
                         help="keys of the env's step infos to store, at ('next', 'info', KEY), "
                         "e.g. --info-keys is_success (default: none)")
    collect.add_argument("--num-envs", type=_positive_int,
                         help="envs in all, split evenly over the workers (default: 8, or --workers x "
                         "--envs-per-worker)")
    collect.add_argument("--workers", type=_positive_int, default=1,
                         help="worker processes stepping the envs (a MultiSyncCollector; default: "
                         "%(default)s, every env in this process)")
    collect.add_argument("--envs-per-worker", type=_positive_int,
                         help="envs each worker steps (default: --num-envs / --workers)")
    collect.add_argument("--out", required=True, help="folder for the run (created; must be new or empty)")
    collect.add_argument("--seed", type=_seed,
                         help="env i is first reset with seed + i (default: unseeded)")
    collect.add_argument("--frames-per-batch", type=_positive_int,
                         help="frames per batch, a multiple of --num-envs "
                         "(default: 128 steps per env, fewer if --frames is smaller)")
    collect.add_argument("--no-next-obs", action="store_true",
                         help="leave out the next observations (about half the size for pixel envs); "
                         "rlcollect.load_run(OUT) rebuilds them from the stored observations and the "
                         "few it keeps (episode ends, batch ends)")
    collect.add_argument("--format", choices=("memmap", "minari"), default="memmap",
                         help="memmap: the run folder only (default); minari: also the episodes that "
                         "ended as the Minari dataset --dataset-id (needs rlcollect[minari])")
    collect.add_argument("--dataset-id", metavar="ID",
                         help="the Minari dataset id with --format minari, e.g. rlcollect/cartpole-random-v0")
    collect.add_argument("--log", choices=("tensorboard", "wandb"),
                         help="log each batch's episodes and counters to TensorBoard or Weights & Biases "
                         "(pip install tensorboard / wandb; W&B follows WANDB_MODE, e.g. offline)")
    collect.add_argument("--log-dir", metavar="DIR",
                         help="where --log writes (default: OUT/logs)")
    collect.add_argument("--force", action="store_true",
                         help="overwrite a previous run in --out, deleting only the files it wrote (a "
                         "folder holding other files is refused, naming them), and a Minari dataset of "
                         "the same id")
    collect.add_argument("--no-progress", action="store_true", help="no progress bar")
    collect.set_defaults(handler=_collect)


def _positive_float(text: str) -> float:
    """A number of seconds in (0, a day]: inf and nan are refused (the command must end)."""
    allowed = f"a number of seconds > 0 and at most {86_400} (a day)"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def _add_tune(commands: Any) -> None:
    """The ``tune`` subcommand."""
    from rlcollect.tuning.kinds import KINDS

    tune = commands.add_parser(
        "tune",
        help="measure which collector, workers, envs and batch collect fastest for an env and policy",
        description="Measure the env's and the policy's cost per frame, predict every collector "
        "configuration, run the most promising ones for real and print the fastest with the code "
        "that builds it.",
        epilog="example: rlcollect tune --env CartPole-v1 --policy my_pkg.policies:make_policy --seconds 60",
    )
    _add_env_and_policy(tune)
    tune.add_argument("--seconds", type=_positive_float, default=60.0,
                      help="about how long to measure (default: %(default)s)")
    tune.add_argument("--num-envs", type=_positive_int, help="envs in all (default: tuned too)")
    tune.add_argument("--max-envs", type=_positive_int, default=64,
                      help="the most envs in all to try without --num-envs (default: %(default)s)")
    tune.add_argument("--frames-per-batch", type=_positive_int,
                      help="frames per delivered batch (MultiAsync and AsyncBatched deliver one worker's; "
                      "default: tuned, about a tenth of a second's frames)")
    tune.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), metavar="KIND",
                      help=f"the collectors to weigh, some of {', '.join(KINDS)} (default: all)")
    tune.add_argument("--no-progress", action="store_true", help="no progress bar")
    tune.set_defaults(handler=_tune)


def _add_inspect_and_export(commands: Any) -> None:
    """The ``inspect`` and ``export`` subcommands."""
    inspect = commands.add_parser(
        "inspect",
        help="print the layout, frames and episodes of a run folder",
        description="Print a run folder's batch layout (keys, shapes, dtypes), frame count and episodes.",
    )
    inspect.add_argument("path", help="a folder written by rlcollect collect")
    inspect.set_defaults(handler=_inspect)

    export = commands.add_parser(
        "export",
        help="write a run folder's episodes in another format (Minari)",
        description="Write the episodes that ended in a run folder as a Minari dataset, which "
        "minari.load_dataset(ID) opens (in $MINARI_DATASETS_PATH or ~/.minari/datasets).",
    )
    export.add_argument("path", help="a folder written by rlcollect collect")
    export.add_argument("--format", choices=("minari",), required=True, help="the format to write")
    export.add_argument("--dataset-id", metavar="ID", required=True,
                        help="the dataset id, e.g. rlcollect/cartpole-random-v0")
    export.add_argument("--force", action="store_true", help="overwrite a dataset of the same id")
    export.set_defaults(handler=_export)


def _collect(args: argparse.Namespace) -> int:
    from rlcollect.cli.collect import CollectOptions, format_summary, run_collect

    if (args.format == "minari") != (args.dataset_id is not None):
        raise CliError("--format minari and --dataset-id ID go together"
                       if args.format == "minari" else "--dataset-id needs --format minari")
    if args.format == "minari":  # before collecting: a missing minari or a taken id ends it now
        from rlcollect.cli.export import check_dataset_id

        check_dataset_id(args.dataset_id, force=args.force)
    options = CollectOptions(
        out=args.out,
        env=args.env,
        env_kwargs=dict(args.env_kwargs),
        device=args.device,
        obs_dtype=args.obs_dtype,
        info_keys=tuple(args.info_keys),
        frames=args.frames,
        num_envs=_num_envs(args.num_envs, args.workers, args.envs_per_worker),
        workers=args.workers,
        policy=args.policy,
        seed=args.seed,
        frames_per_batch=args.frames_per_batch,
        next_obs=not args.no_next_obs,
        log=args.log,
        log_dir=args.log_dir,
        force=args.force,
        progress=not args.no_progress,
        command=shlex.join(["rlcollect", *args.argv]),
    )
    summary = run_collect(options)
    print(format_summary(summary, options))
    if not summary.complete:
        by = f" by {signal.Signals(summary.signal).name}" if summary.signal is not None else ""
        print(f"rlcollect: interrupted{by}; {summary.out} holds the first {summary.batches} batches",
              file=sys.stderr)
        return 128 + (summary.signal or signal.SIGINT)
    if args.format == "minari":
        return _export(args, path=str(summary.out))
    return 0


def _export(args: argparse.Namespace, path: str | None = None) -> int:
    from rlcollect.cli.export import export_minari, format_export

    summary = export_minari(path or args.path, args.dataset_id, force=args.force)
    print(format_export(summary))
    return 0


def _num_envs(num_envs: int | None, workers: int, per_worker: int | None) -> int:
    """Envs in all from ``--num-envs``, ``--workers`` and ``--envs-per-worker`` (which must agree)."""
    if per_worker is None:
        num_envs = 8 if num_envs is None else num_envs
        if num_envs % workers:
            raise CliError(f"--num-envs {num_envs} cannot be split evenly over --workers {workers}: "
                           "give a multiple of --workers, or --envs-per-worker")
        return num_envs
    if num_envs is not None and num_envs != workers * per_worker:
        raise CliError(f"--num-envs {num_envs} is not --workers {workers} x --envs-per-worker {per_worker}: "
                       "give two of the three")
    return workers * per_worker


def _tune(args: argparse.Namespace) -> int:
    from rlcollect.cli.tune import TuneOptions, run_tune

    print(run_tune(TuneOptions(
        env=args.env, env_kwargs=dict(args.env_kwargs), policy=args.policy, seconds=args.seconds,
        num_envs=args.num_envs, max_envs=args.max_envs, frames_per_batch=args.frames_per_batch,
        kinds=args.kinds, progress=not args.no_progress,
    )))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from rlcollect.cli.inspect_run import describe_run

    print(describe_run(args.path))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlcollect`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 for a bad argument or input (reported on one line on
        stderr), 130 for a run interrupted with Ctrl-C (SIGINT), 143 for one stopped by SIGTERM.
    """
    try:
        with StopSignals():  # SIGTERM too ends in KeyboardInterrupt's clean path, as Stopped
            return _run(argv)
    except CliError as error:
        print(f"{_PREFIX}{one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:  # before a run folder was made, or in another command
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        print(f"rlcollect: interrupted by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and argument errors
        return exit_.code if isinstance(exit_.code, int) else 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # run.json records the command as typed
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
