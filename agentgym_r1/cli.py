"""The ``agentgym-r1`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _eval(args: argparse.Namespace) -> int:
    from agentgym_r1.leaderboard.cli import run_eval

    return run_eval(args)


def _serve_retriever(args: argparse.Namespace) -> int:
    from agentgym_r1.retrieval.server import serve

    opts = {"model": args.model} if args.model else {}
    serve(args.index, host=args.host, port=args.port, log_level=args.log_level, **opts)
    return 0


def _serve_env(args: argparse.Namespace) -> int:
    from agentgym_r1.serve.openenv_server import parse_env_kwargs, serve

    serve(
        args.env_id,
        parse_env_kwargs(args.env_kwargs),
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout or None,
        single_thread=True if args.single_thread else None,
        log_level=args.log_level,
    )
    return 0


def _serve_mcp(args: argparse.Namespace) -> int:
    from agentgym_r1.serve.mcp_server import serve
    from agentgym_r1.serve.openenv_server import parse_env_kwargs

    serve(
        args.env_id,
        parse_env_kwargs(args.env_kwargs),
        transport=args.transport,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
    )
    return 0


def _serve_proxy(args: argparse.Namespace) -> int:
    from agentgym_r1.adapters.proxy_server import serve

    serve(
        args.model,
        backend=args.backend,
        device=args.device,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        max_n=args.max_n,
        max_sessions=args.max_sessions,
        session_timeout_s=args.session_timeout,
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    """Hand the rest of the command line (``--config run.yaml`` and flags) to the trainer's TrlParser."""
    from agentgym_r1.error import require

    require("trl", "train", f"agentgym-r1 train {args.algorithm}")
    from agentgym_r1.trainers.cli import run_from_argv

    if args.algorithm == "grpo":
        from agentgym_r1.trainers.configs import AgentGRPOConfig as config
        from agentgym_r1.trainers.grpo import AgentGRPOTrainer as trainer
    else:
        from agentgym_r1.trainers.configs import AgentPPOConfig as config
        from agentgym_r1.trainers.ppo import AgentPPOTrainer as trainer
    run_from_argv(config, trainer, args.trainer_args)
    return 0


def _adapter(args: argparse.Namespace) -> int:
    """``agentgym-r1 adapter ADAPTER_DIR --merge OUT``: the adapter merged into its base, saved as a model."""
    from agentgym_r1.adapters.loading import merge_adapter

    print(f"merged weights written to {merge_adapter(args.adapter_dir, args.merge)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym-r1", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    from agentgym_r1.leaderboard.cli import add_leaderboard_parser

    add_leaderboard_parser(sub)
    ev = sub.add_parser("eval", help="evaluate a policy on one env")
    ev.add_argument(
        "--policy",
        required=True,
        help="a baseline for the env (random, scripted, rag, react, rule, "
        "oracle), hf:PATH, vllm:PATH or openai:URL#MODEL",
    )
    ev.add_argument("--env", required=True, help="an env id, e.g. AgentR1/GSM8K-v0")
    ev.add_argument("--source", default=None, help="the env's data source (e.g. synthetic, hf, a path)")
    from agentgym_r1.leaderboard.cli import MAX_EPISODES, SEED_MAX, add_play_options, int_arg, port_arg

    ev.add_argument("--episodes", type=int_arg(1, MAX_EPISODES), default=20)
    ev.add_argument("--seed", type=int_arg(0, SEED_MAX), default=0)

    add_play_options(ev)
    ev.add_argument(
        "--results",
        default=None,
        help="results file to record the episodes in and resume from (default: a new temporary one)",
    )
    ev.add_argument("--json", action="store_true", help="also print the summary as JSON")
    ev.add_argument("-v", "--verbose", action="store_true", help="print every episode")
    ev.set_defaults(func=_eval)
    serve = sub.add_parser("serve", help="run a server").add_subparsers(dest="server", required=True)
    sr = serve.add_parser("retriever", help="serve a saved retrieval index over HTTP (POST /retrieve, GET /health)")
    sr.add_argument("--index", required=True, help="an index directory built by build_retriever")
    sr.add_argument("--host", default="127.0.0.1")
    sr.add_argument("--port", type=port_arg, default=8000)
    sr.add_argument("--model", default=None, help="embedding model directory (dense/hybrid; default: the saved one)")
    sr.add_argument("--log-level", default="warning")
    sr.set_defaults(func=_serve_retriever)
    se = serve.add_parser(
        "env",
        help="serve a registered env with openenv-core's server (/reset, /step, /state, "
        "/schema, /health, the /ws sessions)",
    )
    se.add_argument("env_id", help="a registered env id, e.g. AgentR1/GSM8K-v0")
    se.add_argument(
        "env_kwargs",
        nargs="*",
        metavar="KEY=VALUE",
        help="the env's constructor options, values read as JSON where they parse (source=synthetic)",
    )
    se.add_argument("--host", default="127.0.0.1")
    se.add_argument("--port", type=port_arg, default=8000)
    se.add_argument("--max-sessions", type=int, default=16, help="the most /ws sessions open at once")
    se.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        help="seconds without a message after which a session is closed (0: never)",
    )
    se.add_argument(
        "--single-thread",
        action="store_true",
        help="run every session's env calls on one thread (always so for envs that are not thread-safe)",
    )
    se.add_argument("--log-level", default="warning")
    se.set_defaults(func=_serve_env)
    sm = serve.add_parser(
        "mcp",
        help="serve a registered env's tools as an MCP server (streamable HTTP at "
        "http://HOST:PORT/mcp, or stdio); needs the 'mcp' extra",
    )
    sm.add_argument("env_id", help="a registered env id with tools, e.g. AgentR1/HotpotQA-v0")
    sm.add_argument(
        "env_kwargs",
        nargs="*",
        metavar="KEY=VALUE",
        help="the env's constructor options, values read as JSON where they parse (source=synthetic)",
    )
    sm.add_argument("--transport", choices=["streamable-http", "stdio"], default="streamable-http")
    sm.add_argument("--host", default="127.0.0.1")
    sm.add_argument("--port", type=port_arg, default=8000)
    sm.add_argument("--log-level", default="warning")
    sm.set_defaults(func=_serve_mcp)
    sp = serve.add_parser(
        "proxy",
        help="serve a local model under the OpenAI chat-completions API and record each session's calls as "
        "training rows (X-Session-Id header or the API key names the session; POST /v1/sessions/ID/reward closes it)",
    )
    sp.add_argument("--model", required=True, help="a local model directory (save_pretrained)")
    sp.add_argument("--backend", choices=["transformers", "vllm"], default="transformers")
    sp.add_argument("--device", default="cpu", help="the transformers backend's device (cpu, cuda)")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=port_arg, default=8000)
    sp.add_argument("--max-n", type=int_arg(1, 64), default=8, help="the most choices (n) one request may ask")
    sp.add_argument("--max-sessions", type=int_arg(1, 10**6), default=1024, help="the most sessions held at once")
    sp.add_argument(
        "--session-timeout", type=float, default=600.0, help="seconds idle after which a session is evicted"
    )
    sp.add_argument("--log-level", default="warning")
    sp.set_defaults(func=_serve_proxy)
    tr = sub.add_parser(
        "train",
        help="train a policy with GRPO or PPO (needs the 'train' extra)",
        description="Options after the algorithm go to the trainer: --config run.yaml, or any field "
        "of AgentGRPOConfig / AgentPPOConfig as --field value.",
    )
    tr.add_argument("algorithm", choices=["grpo", "ppo"])
    tr.add_argument("trainer_args", nargs=argparse.REMAINDER, help="--config run.yaml and trainer flags")
    tr.set_defaults(func=_train)
    ad = sub.add_parser(
        "adapter",
        help="act on a LoRA adapter directory saved by a use_peft run (needs the 'lora' extra)",
        description="The adapter plays on its base everywhere a model directory is taken (eval --policy hf:DIR, "
        "leaderboard run, inspect --model DIR); --merge writes the merged weights as a plain model directory.",
    )
    ad.add_argument("adapter_dir", help="the adapter directory (adapter_config.json, adapter_model.safetensors)")
    ad.add_argument("--merge", required=True, metavar="OUT_DIR", help="write base + adapter merged to OUT_DIR")
    ad.set_defaults(func=_adapter)
    from agentgym_r1.adapters.inspector import add_inspect_parser
    from agentgym_r1.envs.gsm8k.expert import expert_actions

    add_inspect_parser(sub, tiny_expert=expert_actions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym_r1.error import AgentGymError

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # a usage error (argparse printed it; status 2) or --help (0): the status, as for errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        return args.func(args)
    except AgentGymError as e:
        print(f"agentgym-r1: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
