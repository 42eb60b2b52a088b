"""PPO on CartPole-v1, collecting with rlcollect's ``MultiSyncCollector`` (2 workers x 4 envs).

One file, read top to bottom (CleanRL style): the arguments, the networks, the collector, then the
loop ``collect -> GAE -> clipped-surrogate epochs -> push the new weights to the workers``.

The advantage estimate (GAE) uses nothing but the batch. Each frame carries its own
``("next", "observation")``, the TRUE final observation where an episode ended, so

    delta_t = r_t + gamma * V(next_obs_t) * (1 - terminated_t) - V(obs_t)

bootstraps where an episode was cut by the time limit (``truncated``) or by the end of the batch,
and does not where the pole fell (``terminated``). The recursion
``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}`` stops at every episode end and at the
end of the batch.

Run (three seeds, ~1-2 minutes each on 2 CPU cores; writes runs/ppo_cartpole/ppo_cartpole.{png,md},
the plot needing ``pip install 'rlcollect[examples]'``; ``--out docs`` remakes the committed pages):

    python examples/ppo_cartpole.py --seed 0 1 2

A short run that writes nothing: ``python examples/ppo_cartpole.py --frames 40000 --out ""``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tensordict.nn import TensorDictModule
from torch import nn

from rlcollect import MultiSyncCollector


def arg(default: Any, help: str) -> Any:
    """A field of :class:`Args` with its command-line help."""
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """Everything the run depends on; each field is also a command-line flag (``--num-steps``)."""

    seed: int = arg(0, "seed of the envs, the networks and the sampling; several run one after the other")
    frames: int = arg(300_000, "env steps in all, summed over envs")
    env_id: str = arg("CartPole-v1", "the Gymnasium env id")
    num_workers: int = arg(2, "worker processes")
    envs_per_worker: int = arg(4, "envs stepped by each worker")
    num_steps: int = arg(32, "T: steps per env and batch (a batch is [8 envs, 32 steps] = 256 frames)")
    lr: float = arg(1e-3, "Adam learning rate")
    anneal_lr: bool = arg(True, "anneal the learning rate linearly down to 0 at --frames")
    gamma: float = arg(0.98, "discount factor")
    gae_lambda: float = arg(0.8, "GAE lambda")
    epochs: int = arg(20, "passes over each batch")
    minibatch_size: int = arg(256, "frames per gradient step")
    clip_coef: float = arg(0.2, "PPO's clipping of the probability ratio")
    ent_coef: float = arg(0.0, "weight of the entropy bonus")
    vf_coef: float = arg(0.5, "weight of the value loss")
    max_grad_norm: float = arg(0.5, "gradients are clipped to this norm")
    hidden: int = arg(64, "units per hidden layer")
    window: int = arg(20, "the reported return is the mean of the last `window` episodes")
    target: float = arg(475.0, "the return the docs report reaching (mean of the last `window` episodes)")
    log_every: int = arg(50, "batches between progress lines")
    out: str = arg(
        "runs/ppo_cartpole", "folder for ppo_cartpole.png and .md ('': none; docs/ holds the committed ones)"
    )


@dataclass
class Result:
    """What one run measured; ``main`` returns it."""

    seed: int
    frames: int = 0
    seconds: float = 0.0  # wall time of the loop: collection and learning
    fps: float = 0.0  # frames / seconds
    collect_fps: float = 0.0  # frames per second of collection time alone (the workers', summed)
    final_return: float = float("nan")  # mean return of the last `window` episodes at the end
    episodes: int = 0
    frames_to_target: int | None = None  # first frame count where that mean reached `target`
    frames_stable: int | None = None  # frame count from which that mean stayed >= `target` to the end
    curve_frames: list[int] = field(default_factory=list)
    curve_return: list[float] = field(default_factory=list)
    curve_seconds: list[float] = field(default_factory=list)
    curve_fps: list[float] = field(default_factory=list)  # frames/s over the last 20 batches


class Actor(nn.Module):
    """Observations [N, 4] -> (sampled action [N], its log-probability [N])."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int) -> None:
        super().__init__()
        self.logits = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, num_actions),
        )

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=self.logits(observation))
        action = dist.sample()
        return action, dist.log_prob(action)


def make_critic(obs_dim: int, hidden: int) -> nn.Module:
    """Observations [..., 4] -> state values [..., 1]."""
    return nn.Sequential(
        nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
    )


def main(args: Args) -> Result:
    torch.manual_seed(args.seed)
    obs_dim, num_actions = 4, 2  # CartPole-v1
    actor = Actor(obs_dim, num_actions, args.hidden)
    critic = make_critic(obs_dim, args.hidden)
    # The workers run a copy of this module; its extra output lands in the batch as "sample_log_prob".
    policy = TensorDictModule(actor, in_keys=["observation"], out_keys=["action", "sample_log_prob"])
    optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=args.lr, eps=1e-5)
    generator = torch.Generator().manual_seed(args.seed)  # minibatch order

    num_envs = args.num_workers * args.envs_per_worker
    frames_per_batch = num_envs * args.num_steps
    collector = MultiSyncCollector(
        args.env_id,
        policy,
        num_workers=args.num_workers,
        num_envs_per_worker=args.envs_per_worker,
        frames_per_batch=frames_per_batch,
        total_frames=args.frames - args.frames % frames_per_batch,  # whole batches, never past `frames`
        seed=args.seed,
    )

    # Preallocated: the episode bookkeeping and the advantages of one batch.
    episode_return = torch.zeros(num_envs)  # running return of each env's current episode
    finished: list[float] = []  # returns of completed episodes, in order
    advantages = torch.zeros(num_envs, args.num_steps)  # [N, T]
    result = Result(args.seed)

    frames = 0
    start = time.perf_counter()
    for i, batch in enumerate(collector):
        assert batch is not None
        obs = batch["observation"]  # [N, T, 4]
        next_obs = batch["next", "observation"]  # [N, T, 4]: true final observation at episode ends
        action = batch["action"]  # [N, T]
        old_log_prob = batch["sample_log_prob"]  # [N, T]
        reward = batch["next", "reward"][..., 0]  # [N, T]
        terminated = batch["next", "terminated"][..., 0]  # [N, T]
        done = batch["next", "done"][..., 0]  # [N, T]: terminated or truncated
        frames += batch.numel()

        # -- episode returns, straight from the batch --------------------------------------
        for t in range(args.num_steps):
            episode_return += reward[:, t]
            ended = done[:, t]
            if ended.any():
                finished.extend(episode_return[ended].tolist())
                episode_return[ended] = 0.0

        # -- GAE: bootstrap on truncated (and at the batch end), not on terminated ---------
        with torch.no_grad():
            value = critic(obs)[..., 0]  # [N, T]
            next_value = critic(next_obs)[..., 0]  # [N, T]
            delta = reward + args.gamma * next_value * (~terminated) - value
            running = torch.zeros(num_envs)
            for t in reversed(range(args.num_steps)):
                running = delta[:, t] + args.gamma * args.gae_lambda * (~done[:, t]) * running
                advantages[:, t] = running
            returns = advantages + value  # value targets

        # -- PPO epochs over the flattened batch --------------------------------------------
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.lr * (1.0 - (frames - batch.numel()) / args.frames)
        b_obs, b_action, b_log_prob = obs.reshape(-1, obs_dim), action.reshape(-1), old_log_prob.reshape(-1)
        b_adv, b_returns = advantages.reshape(-1), returns.reshape(-1)
        size = b_obs.shape[0]
        for _ in range(args.epochs):
            order = torch.randperm(size, generator=generator)
            for first in range(0, size, args.minibatch_size):
                idx = order[first : first + args.minibatch_size]
                dist = torch.distributions.Categorical(logits=actor.logits(b_obs[idx]))
                ratio = (dist.log_prob(b_action[idx]) - b_log_prob[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                clipped = ratio.clamp(1.0 - args.clip_coef, 1.0 + args.clip_coef)
                policy_loss = -torch.min(adv * ratio, adv * clipped).mean()
                value_loss = 0.5 * (critic(b_obs[idx])[..., 0] - b_returns[idx]).pow(2).mean()
                loss = policy_loss + args.vf_coef * value_loss - args.ent_coef * dist.entropy().mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], args.max_grad_norm)
                optimizer.step()

        # The workers pull these weights before their next batch (stamped policy_version = i + 1).
        collector.update_policy_weights_()

        # -- bookkeeping ------------------------------------------------------------------
        seconds = time.perf_counter() - start
        mean_return = sum(finished[-args.window :]) / len(finished[-args.window :]) if finished else 0.0
        if len(finished) >= args.window and mean_return >= args.target and result.frames_to_target is None:
            result.frames_to_target = frames
        back = min(20, len(result.curve_frames))  # frames/s over the last 20 batches (or since the start)
        then_frames = result.curve_frames[-back] if back else 0
        then_seconds = result.curve_seconds[-back] if back else 0.0
        result.curve_frames.append(frames)
        result.curve_return.append(mean_return)
        result.curve_seconds.append(seconds)
        result.curve_fps.append((frames - then_frames) / (seconds - then_seconds))
        if args.log_every and (i + 1) % args.log_every == 0:
            print(f"seed {args.seed} | frames {frames:7d} | episodes {len(finished):5d} | "
                  f"return (last {args.window}) {mean_return:6.1f} | {result.curve_fps[-1]:6.0f} frames/s")

    result.seconds = time.perf_counter() - start
    result.collect_fps = collector.stats().fps
    collector.shutdown()
    result.frames, result.episodes = frames, len(finished)
    result.fps = frames / result.seconds
    result.final_return = result.curve_return[-1] if result.curve_return else float("nan")
    for point_frames, point_return in zip(result.curve_frames[::-1], result.curve_return[::-1], strict=True):
        if point_return < args.target:
            break
        result.frames_stable = point_frames
    print(f"seed {args.seed}: {frames} frames in {result.seconds:.1f} s ({result.fps:.0f} frames/s, "
          f"collection alone {result.collect_fps:.0f} frames/s), {result.episodes} episodes, "
          f"return (last {args.window}) {result.final_return:.1f}, "
          f"{args.target:.0f} first reached at {result.frames_to_target} frames, "
          f"held from {result.frames_stable} frames to the end")
    return result


# -- command line and docs ------------------------------------------------------------------------


def parse_args() -> list[Args]:
    """One ``Args`` per ``--seed`` value (``--seed 0 1 2`` runs three seeds one after the other)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    for f in dataclasses.fields(Args):
        flag, default = "--" + f.name.replace("_", "-"), f.default
        text = f.metadata["help"] + " (default: %(default)s)"
        if f.name == "seed":
            parser.add_argument(flag, type=int, nargs="+", default=[default], help=text)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=type(default), default=default, help=text)
    ns = vars(parser.parse_args())
    seeds = ns.pop("seed")
    return [Args(seed=seed, **ns) for seed in seeds]


def write_docs(results: list[Result], args: Args, command: str) -> None:
    """<out>/ppo_cartpole.png (return and frames/s against frames, one line per seed) and .md."""
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plot_curves(results, args)
    write_markdown(results, args, command)


def plot_curves(results: list[Result], args: Args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_return, ax_fps) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        ax_return.plot(r.curve_frames, r.curve_return, label=f"seed {r.seed}")
        ax_fps.plot(r.curve_frames, r.curve_fps, label=f"seed {r.seed}")
    ax_return.axhline(args.target, color="gray", linestyle="--", linewidth=1,
                      label=f"target {args.target:.0f}")
    ax_return.set(xlabel="frames", ylabel=f"mean return, last {args.window} episodes",
                  title=f"PPO {args.env_id}: MultiSyncCollector")
    ax_fps.set(xlabel="frames", ylabel="frames/s over 20 batches (collection + learning)", title="throughput")
    ax_return.legend()
    ax_fps.legend()
    fig.tight_layout()
    fig.savefig(Path(args.out) / "ppo_cartpole.png", dpi=100)
    plt.close(fig)


def write_markdown(results: list[Result], args: Args, command: str) -> None:
    rows = "\n".join(
        f"| {r.seed} | {r.final_return:.1f} | {r.frames_to_target or 'not reached'} | "
        f"{r.frames_stable or 'no'} | "
        f"{r.episodes} | {r.frames} | {r.seconds:.0f} | {r.fps:.0f} | {r.collect_fps:.0f} |"
        for r in results
    )
    header = (
        f"| seed | return, last {args.window} episodes (end) | frames when first >= {args.target:.0f} "
        f"| >= {args.target:.0f} from frame to the end "
        "| episodes | frames | wall s | frames/s | collection-only frames/s |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    workers = (f"{args.num_workers} workers x {args.envs_per_worker} envs, batches of "
               f"[{args.num_workers * args.envs_per_worker} envs, {args.num_steps} steps]")
    settings = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(args).items() if k not in ("seed", "out"))
    text = f"""# PPO on CartPole-v1 with `MultiSyncCollector`

![learning curves](ppo_cartpole.png)

`examples/ppo_cartpole.py`: PPO with a `MultiSyncCollector`
({workers}), GAE computed from the batch alone (bootstrapping on `truncated`, not on
`terminated`), new weights pushed with `collector.update_policy_weights_()` after every update.
Target: mean return of the last {args.window} episodes >= {args.target:.0f} within {args.frames:,} frames.

{header}
{rows}

Reproduce: `{command}` (on a shared 2-core CPU machine; wall times vary with load).

Settings: {settings}.

frames/s counts collection and learning together (the learner trains between batches, the
workers wait); collection-only frames/s is the workers' rate while they collect. Both depend
on what else the machine runs at the time far more than on the seed. The learning itself does
not: `MultiSyncCollector` with a seed gives the same batches run after run, so on one machine
each seed's episodes and returns repeat exactly.
"""
    (Path(args.out) / "ppo_cartpole.md").write_text(text)


if __name__ == "__main__":
    import importlib.util
    import sys

    runs = parse_args()
    if runs[0].out and importlib.util.find_spec("matplotlib") is None:  # say so before training
        sys.exit("the plot needs matplotlib: pip install 'rlcollect[examples]' (or --out '' for no plot)")
    results = [main(a) for a in runs]
    if runs[0].out:
        write_docs(results, runs[0], "python examples/ppo_cartpole.py " + " ".join(sys.argv[1:]))
