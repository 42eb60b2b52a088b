"""SAC on Pendulum-v1: a ``MultiAsyncCollector`` fills a shared ``ReplayBuffer`` in the background.

One file, read top to bottom (CleanRL style): the arguments, the networks, the replay buffer and
the collector, ``collector.start()``, then the learner loop, which only samples and updates.

- Collection runs in the background (``collector.start()``): two worker processes step the envs
  with their own copy of the actor and the frames land in the replay buffer without the learner
  asking for them.
- The update-to-data ratio (``--utd``, updates per collected frame) is held by the learner:
  it trains as many updates as the frames written allow, and when collection runs more than
  ``--max-ahead`` frames ahead of that (the learner is the slow side on a small CPU), it holds
  the collector with ``collector.pause()`` while it catches up.
- New actor weights go to the workers every ``--push-every`` updates
  (``collector.update_policy_weights_()``); each frame is stamped with the ``policy_version`` that
  chose its action, so the lag of the data is read straight off sampled frames.
- Pendulum's episodes end only by the 200-step time limit (``truncated``); the critic target
  bootstraps there, ``r + gamma * (1 - terminated) * V(next_obs)``. ``--truncation-as-termination``
  uses ``done`` instead (the common bug: the value of the state at step 200 is cut to zero).

Run (three seeds, both ways of handling truncation; writes runs/sac_pendulum/sac_pendulum.{png,md},
the plot needing ``pip install 'rlcollect[examples]'``; ``--out docs`` remakes the committed pages):

    python examples/sac_pendulum.py --seed 0 1 2 --compare-truncation

One short run that writes nothing: ``python examples/sac_pendulum.py --frames 10000 --out ""``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from rlcollect import MultiAsyncCollector
from rlcollect.replay import ReplayBuffer


def arg(default: Any, help: str) -> Any:
    """A field of :class:`Args` with its command-line help."""
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """Everything the run depends on; each field is also a command-line flag (``--push-every``)."""

    seed: int = arg(0, "seed of the envs, the networks and the sampling; several run one after the other")
    frames: int = arg(30_000, "env steps in all, summed over workers")
    env_id: str = arg("Pendulum-v1", "the Gymnasium env id")
    num_workers: int = arg(2, "worker processes, one env each")
    frames_per_batch: int = arg(50, "frames a worker collects before it reports (and pulls new weights)")
    buffer_size: int = arg(100_000, "replay buffer capacity, in frames")
    learning_starts: int = arg(1_000, "uniform random actions for these frames, then updates start")
    batch_size: int = arg(256, "frames per update")
    utd: float = arg(1.0, "updates per collected frame")
    max_ahead: int = arg(200, "frames collection may run ahead of the learner before it is paused")
    push_every: int = arg(10, "updates between weight pushes to the workers")
    gamma: float = arg(0.99, "discount factor")
    tau: float = arg(0.005, "target networks: theta' <- (1 - tau) theta' + tau theta")
    actor_lr: float = arg(3e-4, "Adam learning rate of the actor")
    critic_lr: float = arg(1e-3, "Adam learning rate of the critics")
    alpha_lr: float = arg(1e-3, "Adam learning rate of the entropy temperature")
    init_alpha: float = arg(1.0, "initial entropy temperature")
    hidden: int = arg(64, "units per hidden layer (small: the learner is the slow side on 2 CPU cores)")
    truncation_as_termination: bool = arg(False, "treat the time limit as a true end (worse)")
    window: int = arg(10, "the reported return is the mean of the last `window` training episodes")
    target: float = arg(-250.0, "the return the docs report reaching (mean of the last `window` episodes)")
    eval_episodes: int = arg(10, "deterministic episodes after training")
    log_every: int = arg(2_000, "updates between progress lines (0: none)")
    compare_truncation: bool = arg(
        False, "run each seed both ways, with and without --truncation-as-termination"
    )
    out: str = arg(
        "runs/sac_pendulum", "folder for sac_pendulum.png and .md ('': none; docs/ holds the committed ones)"
    )


@dataclass
class Result:
    """What one run measured; ``main`` returns it."""

    seed: int
    truncation_as_termination: bool
    frames: int = 0
    updates: int = 0
    seconds: float = 0.0  # wall time from start() to the last update
    fps: float = 0.0  # frames / seconds (collection throttled to the learner's pace)
    collect_fps: float = 0.0  # the workers' rate while collecting, summed
    episodes: int = 0
    first_return: float = math.nan  # mean return of the first `window` training episodes
    final_return: float = math.nan  # mean return of the last `window` training episodes
    eval_return: float = math.nan  # mean return of `eval_episodes` deterministic episodes
    frames_to_target: int | None = None  # first frame count where the last-`window` mean >= target
    sampled_lag: float = 0.0  # mean over sampled frames of (learner's version - frame's version)
    pushes: int = 0
    pauses: int = 0
    curve_frames: list[int] = field(default_factory=list)
    curve_return: list[float] = field(default_factory=list)
    curve_seconds: list[float] = field(default_factory=list)
    curve_fps: list[float] = field(default_factory=list)  # frames/s over the last 10 curve points


class Actor(nn.Module):
    """Observations [N, 3] -> tanh-squashed Gaussian actions in [-2, 2]; ``forward`` samples."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int, scale: float) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.mean = nn.Linear(hidden, act_dim)
        self.log_std = nn.Linear(hidden, act_dim)
        self.scale = scale

    def sample(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrised action [N, act] and its log-probability [N, 1]."""
        h = self.trunk(observation)
        mean, log_std = self.mean(h), self.log_std(h).clamp(-5.0, 2.0)
        u = mean + log_std.exp() * torch.randn_like(mean)
        # log N(u; mean, std) - log |d(scale * tanh u)/du|, the second term written stably
        log_prob = -0.5 * ((u - mean) / log_std.exp()).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = log_prob - (math.log(self.scale) + 2 * (math.log(2.0) - u - F.softplus(-2 * u)))
        return self.scale * torch.tanh(u), log_prob.sum(-1, keepdim=True)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:  # what the workers run
        return self.sample(observation)[0]

    def act_deterministic(self, observation: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.tanh(self.mean(self.trunk(observation)))


class TwinQ(nn.Module):
    """Two Q networks evaluated as one batched matmul: (obs [B, 3], action [B, 1]) -> [2, B, 1]."""

    def __init__(self, in_dim: int, hidden: int, num_q: int = 2) -> None:
        super().__init__()
        sizes = [(in_dim, hidden), (hidden, hidden), (hidden, 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in sizes:  # nn.Linear's initialisation, one set per Q network
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(num_q, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_q, 1, fan_out).uniform_(-bound, bound)))
        self.num_q = num_q

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observation, action], -1).expand(self.num_q, -1, -1)  # [2, B, in]
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.weights) - 1:
                x = F.relu(x)
        return x  # [2, B, 1]


def main(args: Args) -> Result:
    torch.manual_seed(args.seed)
    env = gym.make(args.env_id)  # spaces, and the deterministic evaluation at the end
    assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(env.action_space, gym.spaces.Box)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor = Actor(obs_dim, act_dim, args.hidden, scale=float(env.action_space.high[0]))
    critic = TwinQ(obs_dim + act_dim, args.hidden)
    critic_target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = torch.tensor(math.log(args.init_alpha), requires_grad=True)
    target_entropy = -float(act_dim)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr)
    alpha_opt = torch.optim.Adam([log_alpha], lr=args.alpha_lr)

    # Workers hand whole batches [1 env, 50 steps] to the buffer, flattened to frames.
    total_frames = args.frames - args.frames % args.frames_per_batch
    rb = ReplayBuffer(args.buffer_size, storage="shared", seed=args.seed)
    collector = MultiAsyncCollector(
        args.env_id,
        actor,  # the workers run copies; update_policy_weights_() pulls from this module
        num_workers=args.num_workers,
        frames_per_batch=args.frames_per_batch,
        total_frames=total_frames,
        init_random_frames=args.learning_starts,  # counted by the buffer's write_count
        replay_buffer=rb,
        seed=args.seed,
    )

    result = Result(args.seed, args.truncation_as_termination)
    total_updates = int((total_frames - args.learning_starts) * args.utd)
    version = 0  # weight pushes so far = the policy_version new frames get
    lag_sum = 0.0
    episode_sum: dict[int, float] = {}  # running return of each open trajectory, by traj id
    finished: list[float] = []  # returns of completed episodes, in the order they reached the buffer
    seen = 0  # frames of the buffer already read into the episode bookkeeping

    def sac_update() -> None:
        """One update: critics, actor, temperature, target critics; push weights every few."""
        nonlocal version, lag_sum
        batch = rb.sample(args.batch_size)  # [B] flat frames
        obs, action = batch["observation"], batch["action"]  # [B, 3], [B, 1]
        reward = batch["next", "reward"]  # [B, 1]
        end = batch["next", "done"] if args.truncation_as_termination else batch["next", "terminated"]
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = actor.sample(batch["next", "observation"])
            next_q = critic_target(batch["next", "observation"], next_action).min(0).values  # [B, 1]
            q_target = reward + args.gamma * (~end) * (next_q - alpha * next_log_prob)
        critic_loss = (critic(obs, action) - q_target).pow(2).mean(1).sum()  # both Q networks
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()

        new_action, log_prob = actor.sample(obs)
        actor_loss = (alpha * log_prob - critic(obs, new_action).min(0).values).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        alpha_loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()

        with torch.no_grad():
            torch._foreach_lerp_(list(critic_target.parameters()), list(critic.parameters()), args.tau)
        stamps = batch["policy_version"].clamp(min=0)  # a warm-up frame (-1) counts as chosen by version 0
        lag_sum += float((version - stamps).float().mean())
        result.updates += 1
        if result.updates % args.push_every == 0:
            collector.update_policy_weights_()  # workers pull it before their next batch
            version += 1

    def read_new_frames() -> None:
        """Episode returns and collection lag of the frames written since the last call.

        Called while the collector is paused (or shut down): every frame below ``write_count`` is
        complete (``write_count`` counts a write from its start).
        """
        nonlocal seen
        written = rb.write_count
        if written == seen:
            return
        new = rb.data[torch.arange(seen, written) % rb.capacity]  # [n] frames, in write order
        traj_ids = new["collector", "traj_ids"].tolist()
        rewards, dones = new["next", "reward"][:, 0].tolist(), new["next", "done"][:, 0].tolist()
        for traj, reward, done in zip(traj_ids, rewards, dones, strict=True):
            episode_sum[traj] = episode_sum.get(traj, 0.0) + reward
            if done:
                finished.append(episode_sum.pop(traj))
        seen = written
        recent = finished[-args.window :]
        mean_return = sum(recent) / len(recent) if recent else math.nan
        if len(finished) >= args.window and mean_return >= args.target and result.frames_to_target is None:
            result.frames_to_target = written
        if recent:
            seconds = time.perf_counter() - start
            back = min(10, len(result.curve_frames))
            then_frames = result.curve_frames[-back] if back else 0
            then_seconds = result.curve_seconds[-back] if back else 0.0
            result.curve_frames.append(written)
            result.curve_return.append(mean_return)
            result.curve_seconds.append(seconds)
            result.curve_fps.append((written - then_frames) / (seconds - then_seconds))

    start = time.perf_counter()
    collector.start()
    last_progress = start
    next_log = args.log_every if args.log_every > 0 else math.inf  # updates at the next progress line
    while result.updates < total_updates:
        # updates owed: what the frames written so far allow at the requested UTD ratio
        owed = int(max(rb.write_count - args.learning_starts, 0) * args.utd) - result.updates
        if owed <= 0:  # the learner is ahead of the data: wait for the collector
            if time.perf_counter() - last_progress > 120.0:
                raise RuntimeError("no new frames for 120 s: the collector stalled")
            time.sleep(0.001)
            continue
        last_progress = time.perf_counter()
        if owed / args.utd > args.max_ahead or result.updates >= next_log:
            # Collection ran ahead (or it is time to log): hold it, read the new frames, catch up.
            with collector.pause():
                result.pauses += 1
                read_new_frames()
                for _ in range(min(owed, total_updates - result.updates)):
                    sac_update()
            if result.updates >= next_log:
                next_log += args.log_every
                print(f"seed {args.seed} | frames {rb.write_count:6d} | updates {result.updates:6d} | "
                      f"episodes {len(finished):4d} | return (last {args.window}) "
                      f"{result.curve_return[-1] if result.curve_return else math.nan:7.1f} | "
                      f"alpha {log_alpha.exp().item():.3f} | version {version} | "
                      f"{rb.write_count / (time.perf_counter() - start):4.0f} frames/s")
        else:
            sac_update()
    result.seconds = time.perf_counter() - start
    result.collect_fps = collector.stats().fps
    collector.async_shutdown()  # returns once the background thread wrote its last batch
    read_new_frames()

    # -- deterministic evaluation in this process -----------------------------------------
    eval_returns = []
    for k in range(args.eval_episodes):
        obs_np, _ = env.reset(seed=10_000 + 100 * args.seed + k)
        total, ended = 0.0, False
        while not ended:
            with torch.no_grad():
                act = actor.act_deterministic(torch.as_tensor(obs_np, dtype=torch.float32)[None])[0]
            obs_np, reward, terminated, truncated, _ = env.step(act.numpy())
            total += float(reward)
            ended = terminated or truncated
        eval_returns.append(total)
    env.close()

    result.frames, result.episodes = rb.write_count, len(finished)
    result.fps = result.frames / result.seconds
    result.first_return = sum(finished[: args.window]) / max(len(finished[: args.window]), 1)
    result.final_return = sum(finished[-args.window :]) / max(len(finished[-args.window :]), 1)
    result.eval_return = sum(eval_returns) / max(len(eval_returns), 1)
    result.sampled_lag = lag_sum / max(result.updates, 1)
    result.pushes = version
    mode = "truncation as termination" if args.truncation_as_termination else "bootstrap on truncation"
    print(f"seed {args.seed} ({mode}): {result.frames} frames, {result.updates} updates in "
          f"{result.seconds:.1f} s ({result.fps:.0f} frames/s; collection alone {result.collect_fps:.0f}), "
          f"{result.episodes} episodes, return first {args.window} {result.first_return:.1f}, "
          f"last {args.window} {result.final_return:.1f}, deterministic eval {result.eval_return:.1f}, "
          f"{args.target:.0f} first reached at {result.frames_to_target} frames, policy lag of sampled "
          f"frames {result.sampled_lag:.1f} versions, {result.pauses} pauses")
    return result


# -- command line and docs ------------------------------------------------------------------------


def parse_args() -> list[Args]:
    """One ``Args`` per run: ``--seed 0 1 2`` runs three seeds, ``--compare-truncation`` both ways each."""
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
    modes = [False, True] if ns["compare_truncation"] else [ns["truncation_as_termination"]]
    ns.pop("truncation_as_termination")
    return [Args(seed=s, truncation_as_termination=m, **ns) for m in modes for s in seeds]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def write_docs(results: list[Result], args: Args, command: str) -> None:
    """<out>/sac_pendulum.png (return and frames/s against frames, per seed and mode) and .md."""
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plot_curves(results, args)
    write_markdown(results, args, command)


def plot_curves(results: list[Result], args: Args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_return, ax_fps) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        style = "--" if r.truncation_as_termination else "-"
        mode = "trunc. as term." if r.truncation_as_termination else "bootstrap"
        color = f"C{r.seed % 10}"
        ax_return.plot(r.curve_frames, r.curve_return, style, color=color, label=f"seed {r.seed}, {mode}")
        ax_fps.plot(r.curve_frames, r.curve_fps, style, color=color, label=f"seed {r.seed}, {mode}")
    ax_return.axhline(args.target, color="gray", linestyle=":", linewidth=1,
                      label=f"target {args.target:.0f}")
    ax_return.set(xlabel="frames", ylabel=f"mean return, last {args.window} episodes",
                  title=f"SAC {args.env_id}: MultiAsyncCollector in the background")
    ax_fps.set(xlabel="frames", ylabel="frames/s, learner-paced (over 10 points)", title="throughput")
    ax_return.legend(fontsize=7)
    ax_fps.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(args.out) / "sac_pendulum.png", dpi=100)
    plt.close(fig)


def write_markdown(results: list[Result], args: Args, command: str) -> None:
    def row(r: Result) -> str:
        mode = "truncation as termination" if r.truncation_as_termination else "bootstrap on truncation"
        return (f"| {mode} | {r.seed} | {r.first_return:.0f} | {r.final_return:.0f} | {r.eval_return:.0f} | "
                f"{r.frames_to_target or 'not reached'} | {r.frames} | {r.updates} | {r.seconds:.0f} | "
                f"{r.fps:.0f} | {r.collect_fps:.0f} | {r.sampled_lag:.0f} |")

    header = (
        f"| truncation | seed | return, first {args.window} episodes | return, last {args.window} episodes "
        f"| deterministic eval ({args.eval_episodes} ep.) | frames when first >= {args.target:.0f} | frames "
        "| updates | wall s | frames/s | collection-only frames/s | policy lag of sampled frames |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    summary_header = (
        f"| truncation | mean of last-{args.window} returns over seeds | mean deterministic eval "
        f"| seeds >= {args.target:.0f} |\n|---|---|---|---|"
    )
    summary = []
    for as_termination in (False, True):
        runs = [r for r in results if r.truncation_as_termination == as_termination]
        if runs:
            name = "truncation as termination" if as_termination else "bootstrap on truncation"
            summary.append(
                f"| {name} | {_mean([r.final_return for r in runs]):.0f} | "
                f"{_mean([r.eval_return for r in runs]):.0f} | "
                f"{sum(r.final_return >= args.target for r in runs)} of {len(runs)} |"
            )
    comparison = ""
    by_seed_b = {r.seed: r for r in results if not r.truncation_as_termination}  # bootstrap
    by_seed_t = {r.seed: r for r in results if r.truncation_as_termination}  # as termination
    seeds = sorted(set(by_seed_b) & set(by_seed_t))
    if seeds:
        b_runs, t_runs = [by_seed_b[s] for s in seeds], [by_seed_t[s] for s in seeds]
        lower = sum(t.final_return < b.final_return for b, t in zip(b_runs, t_runs, strict=True))
        later = sum((t.frames_to_target or math.inf) > (b.frames_to_target or math.inf)
                    for b, t in zip(b_runs, t_runs, strict=True))

        def frames_to(runs: list[Result]) -> str:
            reached = [r.frames_to_target for r in runs if r.frames_to_target is not None]
            return f"{_mean([float(f) for f in reached]):,.0f}" if len(reached) == len(runs) else "n/a"

        comparison = f"""
What these runs show: treating truncation as termination ended at
{_mean([r.final_return for r in t_runs]):.0f} against {_mean([r.final_return for r in b_runs]):.0f}
(mean of the last {args.window} training episodes over the seeds; lower for {lower} of {len(seeds)}
seeds) and first reached {args.target:.0f} after {frames_to(t_runs)} frames against {frames_to(b_runs)}
on average (later for {later} of {len(seeds)} seeds); the deterministic evaluations after training
are {_mean([r.eval_return for r in t_runs]):.0f} and {_mean([r.eval_return for r in b_runs]):.0f}.
Pendulum is the mildest case for this mistake: its reward is near 0 with the pendulum balanced
upright, where a trained policy spends the end of every episode, so the value wrongly cut to zero
at step 200 is itself near zero. The error is large only early in training (episodes end with the
pendulum still swinging, at values of several hundred below zero): it slows learning more than it
lowers the final policy. Where the value at the time limit is large (a reward for staying alive,
as in CartPole or the MuJoCo locomotion tasks) the same mistake costs much more (Pardo et al.,
"Time Limits in Reinforcement Learning", ICML 2018).
"""
    settings = ", ".join(
        f"{k}={v}" for k, v in dataclasses.asdict(args).items()
        if k not in ("seed", "out", "truncation_as_termination", "compare_truncation")
    )
    text = f"""# SAC on Pendulum-v1 with a background `MultiAsyncCollector`

![learning curves](sac_pendulum.png)

`examples/sac_pendulum.py`: SAC whose data comes from a `MultiAsyncCollector`
({args.num_workers} workers, one env each) started with `collector.start()`: the workers' batches
land in a `rlcollect.replay.ReplayBuffer` (shared-memory storage) in the background while the
learner samples from it. The learner holds the update-to-data ratio at {args.utd} (it pauses
collection with `collector.pause()` when collection runs more than {args.max_ahead} frames ahead)
and pushes the actor's weights every {args.push_every} updates with
`collector.update_policy_weights_()`. Target: mean return of the last {args.window} training
episodes >= {args.target:.0f} within {args.frames:,} frames.

Pendulum's episodes end only by the 200-step time limit. "bootstrap on truncation" is the
correct target `r + gamma * (1 - terminated) * V(s')`; "truncation as termination"
(`--truncation-as-termination`) uses `done` instead, cutting the value of the last state of
every episode to zero, which teaches the critic that the same state is worth different amounts
depending on the step counter it cannot see.

{summary_header}
{chr(10).join(summary)}
{comparison}
{header}
{chr(10).join(row(r) for r in results)}

Reproduce: `{command}` (on a shared 2-core CPU machine; wall times vary with load).

Settings: {settings}.

Columns: training returns come from the frames in the buffer, grouped by
`("collector", "traj_ids")`, with the stochastic policy; the deterministic evaluation runs
{args.eval_episodes} episodes with the mean action after training. frames/s is paced by the
learner (collection is paused while it catches up); collection-only frames/s is the workers'
rate while they collect. Policy lag is counted in weight versions (one per {args.push_every}
updates): the learner's version minus the `policy_version` stamped on each frame it sampled,
averaged over all sampled frames. It is mostly the frames' age in the buffer (uniform sampling
from everything collected so far); the collection itself adds only about
{args.max_ahead * args.utd / args.push_every:.0f} versions at most, since it pauses whenever it runs
{args.max_ahead} frames ahead of the learner.
"""
    (Path(args.out) / "sac_pendulum.md").write_text(text)


if __name__ == "__main__":
    import importlib.util
    import sys

    runs = parse_args()
    if runs[0].out and importlib.util.find_spec("matplotlib") is None:  # say so before training
        sys.exit("the plot needs matplotlib: pip install 'rlcollect[examples]' (or --out '' for no plot)")
    results = [main(a) for a in runs]
    if runs[0].out:
        write_docs(results, runs[0], "python examples/sac_pendulum.py " + " ".join(sys.argv[1:]))
