"""Recurrent PPO on CartPole-v1 with the velocities masked out, collecting with ``MultiSyncCollector``.

The policy sees the cart's position and the pole's angle, not how fast they change: to balance
the pole it must remember. An LSTM cell carries that memory from step to step, per env:

- **Collecting**: the policy is a ``TensorDictModuleBase`` reading ``observation``, its state
  ``h`` and ``c``, and ``is_init`` (which envs start an episode at this step: the collector gives
  it to a policy that lists it), and writing its next state under ``("next", "h")`` and
  ``("next", "c")``. The collector carries the state from each step to the next, per env, zeros at
  each episode's first step, and stores it: ``h`` and ``c`` (the state each step started from),
  ``("next", "h")``, ``("next", "c")`` and ``is_init`` are in every batch.
- **Learning**: each minibatch is a few envs' whole rows of ``T`` steps, replayed through the LSTM
  from the stored state of their first step, resetting where ``is_init``. Before the first
  update the replay gives back the stored log-probabilities exactly (``Result.replay_error``).
  The value of a frame's ``("next", "observation")`` (the true final one at an episode's end) is
  the LSTM run one step further from the stored ``("next", "h")``, so GAE bootstraps on
  ``truncated`` and not on ``terminated``, as in ``ppo_cartpole.py``.

``--no-memory`` runs the same network with its state zeroed at every step (a policy without
memory), for comparison.

Run (~2-4 minutes per seed on 2 CPU cores; writes runs/lstm_ppo_cartpole/lstm_ppo_cartpole.md,
``--out docs`` remakes the committed page):

    python examples/lstm_ppo_cartpole.py --seed 0 1 2
    python examples/lstm_ppo_cartpole.py --seed 0 1 2 --no-memory --out ""
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from rlcollect import MultiSyncCollector

VISIBLE = [0, 2]  # cart position, pole angle (CartPole's velocities are 1 and 3)


def arg(default: Any, help: str) -> Any:
    """A field of :class:`Args` with its command-line help."""
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """Everything the run depends on; each field is also a command-line flag (``--num-steps``)."""

    seed: int = arg(0, "seed of the envs, the networks and the sampling; several run one after the other")
    frames: int = arg(300_000, "env steps in all, summed over envs")
    memory: bool = arg(True, "carry the LSTM state from step to step (--no-memory: zeros at every step)")
    num_workers: int = arg(2, "worker processes")
    envs_per_worker: int = arg(4, "envs stepped by each worker")
    num_steps: int = arg(32, "T: steps per env and batch (a batch is [8 envs, 32 steps] = 256 frames)")
    lr: float = arg(1e-3, "Adam learning rate")
    gamma: float = arg(0.98, "discount factor")
    gae_lambda: float = arg(0.8, "GAE lambda")
    epochs: int = arg(20, "passes over each batch")
    rows_per_minibatch: int = arg(8, "envs' whole rows per gradient step")
    clip_coef: float = arg(0.2, "PPO's clipping of the probability ratio")
    ent_coef: float = arg(0.0, "weight of the entropy bonus")
    vf_coef: float = arg(0.5, "weight of the value loss")
    max_grad_norm: float = arg(0.5, "gradients are clipped to this norm")
    hidden: int = arg(64, "units of each encoder and LSTM cell")
    window: int = arg(20, "the reported return is the mean of the last `window` episodes")
    log_every: int = arg(50, "batches between progress lines")
    out: str = arg("runs/lstm_ppo_cartpole", "folder for lstm_ppo_cartpole.md ('': none)")


@dataclass
class Result:
    """What one run measured; ``main`` returns it."""

    seed: int
    memory: bool = True
    frames: int = 0
    seconds: float = 0.0
    episodes: int = 0
    final_return: float = float("nan")  # mean return of the last `window` episodes at the end
    best_return: float = float("nan")  # the best such mean along the run
    replay_error: float = float("nan")  # largest |replayed - stored| log-probability, first batch


class MaskVelocity(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """CartPole's observation without its two velocities."""

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(box.low[VISIBLE], box.high[VISIBLE], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[VISIBLE]


def make_env() -> gym.Env[np.ndarray, Any]:
    return MaskVelocity(gym.make("CartPole-v1"))


class Network(nn.Module):
    """An actor and a critic, each an encoder and an LSTM cell of its own (the value loss does not
    pull on the actor's memory), and a head on its cell's output. Their state is one tensor per env,
    ``[4, hidden]``: the actor's ``h`` and ``c``, then the critic's."""

    def __init__(self, hidden: int, memory: bool) -> None:
        super().__init__()
        self.hidden, self.memory = hidden, memory
        self.encoders = nn.ModuleList(nn.Sequential(nn.Linear(len(VISIBLE), hidden), nn.ReLU()) for _ in "av")
        self.cells = nn.ModuleList(nn.LSTMCell(hidden, hidden) for _ in "av")
        self.actor = nn.Sequential(nn.Linear(hidden, 64), nn.ReLU(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(hidden, 64), nn.ReLU(), nn.Linear(64, 1))

    def step(self, obs: torch.Tensor, state: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        """One step of every row (``[rows, ...]``); the state is zeros where ``is_init`` (``[rows, 1]``)."""
        if not self.memory:
            is_init = torch.ones_like(is_init)
        state = state * (~is_init).to(state.dtype)[..., None]
        parts = []
        for i, (encoder, cell) in enumerate(zip(self.encoders, self.cells, strict=True)):
            parts.extend(cell(encoder(obs), (state[:, 2 * i], state[:, 2 * i + 1])))
        return torch.stack(parts, 1)

    def logits(self, state: torch.Tensor) -> torch.Tensor:
        return self.actor(state[..., 0, :])

    def value(self, state: torch.Tensor) -> torch.Tensor:
        return self.critic(state[..., 2, :])[..., 0]


class Policy(TensorDictModuleBase):
    """The network as the collector calls it (see the module docstring)."""

    def __init__(self, net: Network) -> None:
        super().__init__()
        self.net = net
        self.in_keys = ["observation", "state", "is_init"]
        self.out_keys = ["action", "sample_log_prob", ("next", "state")]

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        state = td.get("state", None)
        if state is None:  # the dry step: the collector learns the state's shape from it
            state = torch.zeros(*td.batch_size, 4, self.net.hidden)
        state = self.net.step(td["observation"], state, td["is_init"])
        dist = torch.distributions.Categorical(logits=self.net.logits(state))
        action = dist.sample()
        return td.update({"action": action, "sample_log_prob": dist.log_prob(action),
                          ("next", "state"): state})


def replay(net: Network, batch: TensorDictBase) -> torch.Tensor:
    """The states ``[rows, T, 4, hidden]`` of whole rows, from the state stored at their first step."""
    state, states = batch["state"][:, 0], []
    for t in range(batch.shape[1]):
        state = net.step(batch["observation"][:, t], state, batch["is_init"][:, t])
        states.append(state)
    return torch.stack(states, 1)


def advantages(net: Network, batch: TensorDictBase, args: Args) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE ``[N, T]`` and value targets, from the batch and the states it stores."""
    with torch.no_grad():
        value = net.value(batch["next", "state"])  # the cells' output at each step
        frames = batch.reshape(-1)  # the cells take [rows, ...]: every frame as a row
        is_init = torch.zeros_like(frames["is_init"])  # the next observation continues the episode
        after = net.step(frames["next", "observation"], frames["next", "state"], is_init)
        next_value = net.value(after).reshape(batch.shape)
        reward = batch["next", "reward"][..., 0]
        terminated, done = batch["next", "terminated"][..., 0], batch["next", "done"][..., 0]
        delta = reward + args.gamma * next_value * (~terminated) - value
        adv = torch.zeros_like(delta)
        running = torch.zeros(delta.shape[0])
        for t in reversed(range(delta.shape[1])):
            running = delta[:, t] + args.gamma * args.gae_lambda * (~done[:, t]) * running
            adv[:, t] = running
    return adv, adv + value


def update(net: Network, optimizer: torch.optim.Optimizer, batch: TensorDictBase, args: Args,
           generator: torch.Generator) -> float:
    """PPO epochs over minibatches of whole rows; the first minibatch's replay error (before any
    step: the replayed log-probabilities against the stored ones)."""
    adv, returns = advantages(net, batch, args)
    rows, first_error = batch.shape[0], float("nan")
    for _ in range(args.epochs):
        order = torch.randperm(rows, generator=generator)
        for start in range(0, rows, args.rows_per_minibatch):
            idx = order[start : start + args.rows_per_minibatch]
            states = replay(net, batch[idx])
            dist, values = torch.distributions.Categorical(logits=net.logits(states)), net.value(states)
            log_prob = dist.log_prob(batch["action"][idx])
            if first_error != first_error:  # nan: the first minibatch, before any step
                first_error = float((log_prob - batch["sample_log_prob"][idx]).detach().abs().max())
            ratio = (log_prob - batch["sample_log_prob"][idx]).exp()
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            clipped = ratio.clamp(1.0 - args.clip_coef, 1.0 + args.clip_coef)
            policy_loss = -torch.min(a * ratio, a * clipped).mean()
            value_loss = 0.5 * (values - returns[idx]).pow(2).mean()
            loss = policy_loss + args.vf_coef * value_loss - args.ent_coef * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
            optimizer.step()
    return first_error


def main(args: Args) -> Result:
    torch.manual_seed(args.seed)
    net = Network(args.hidden, args.memory)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr, eps=1e-5)
    generator = torch.Generator().manual_seed(args.seed)
    num_envs = args.num_workers * args.envs_per_worker
    frames_per_batch = num_envs * args.num_steps
    collector = MultiSyncCollector(
        make_env, Policy(net), num_workers=args.num_workers, num_envs_per_worker=args.envs_per_worker,
        frames_per_batch=frames_per_batch, total_frames=args.frames - args.frames % frames_per_batch,
        seed=args.seed,
    )
    result = Result(args.seed, args.memory)
    episode_return, finished = torch.zeros(num_envs), []
    start = time.perf_counter()
    for i, batch in enumerate(collector):
        assert batch is not None
        result.frames += batch.numel()
        reward, done = batch["next", "reward"][..., 0], batch["next", "done"][..., 0]
        for t in range(args.num_steps):
            episode_return += reward[:, t]
            finished.extend(episode_return[done[:, t]].tolist())
            episode_return[done[:, t]] = 0.0
        error = update(net, optimizer, batch, args, generator)
        if i == 0:
            result.replay_error = error
        collector.update_policy_weights_()  # the workers act with the new weights from the next batch
        recent = finished[-args.window :]
        mean = sum(recent) / len(recent) if recent else float("nan")
        if len(finished) >= args.window and not mean <= result.best_return:  # (nan at first)
            result.best_return = mean
        if args.log_every and (i + 1) % args.log_every == 0:
            print(f"seed {args.seed} | frames {result.frames:7d} | episodes {len(finished):5d} | "
                  f"return (last {args.window}) {mean:6.1f} | replay error {error:.1e}")
    collector.shutdown()
    result.seconds = time.perf_counter() - start
    result.episodes = len(finished)
    recent = finished[-args.window :]
    result.final_return = sum(recent) / len(recent) if recent else float("nan")
    print(f"seed {args.seed} ({'memory' if args.memory else 'no memory'}): {result.frames} frames in "
          f"{result.seconds:.0f} s, {result.episodes} episodes, return (last {args.window}) "
          f"{result.final_return:.1f}, best {result.best_return:.1f}, replay error {result.replay_error:.1e}")
    return result


def parse_args() -> list[Args]:
    """One ``Args`` per ``--seed`` value."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    for f in dataclasses.fields(Args):
        flag, default = "--" + f.name.replace("_", "-"), f.default
        if f.name == "seed":
            parser.add_argument(flag, type=int, nargs="+", default=[default], help=f.metadata["help"])
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=f.metadata["help"])
        else:
            parser.add_argument(flag, type=type(default), default=default, help=f.metadata["help"])
    ns = vars(parser.parse_args())
    seeds = ns.pop("seed")
    return [Args(seed=seed, **ns) for seed in seeds]


def write_markdown(results: list[Result], args: Args, command: str) -> None:
    """<out>/lstm_ppo_cartpole.md: one row per seed."""
    rows = "\n".join(f"| {r.seed} | {'yes' if r.memory else 'no'} | {r.final_return:.1f} | "
                     f"{r.best_return:.1f} | {r.episodes} | {r.frames} | {r.seconds:.0f} | "
                     f"{r.replay_error:.1e} |" for r in results)
    settings = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(args).items() if k not in ("seed", "out"))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "lstm_ppo_cartpole.md").write_text(f"""# Recurrent PPO on CartPole-v1 without velocities

| seed | memory | return, last {args.window} episodes (end) | best such mean | episodes | frames | wall s \
| replay error |
|---|---|---|---|---|---|---|---|
{rows}

Reproduce: `{command}` (a shared 2-core CPU machine; wall times vary with load).

Settings: {settings}.
""")


if __name__ == "__main__":
    import sys

    runs = parse_args()
    results = [main(a) for a in runs]
    if runs[0].out:
        write_markdown(results, runs[0], "python examples/lstm_ppo_cartpole.py " + " ".join(sys.argv[1:]))
