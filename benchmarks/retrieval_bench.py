"""Retrieval benchmark: build time, memory, query latency (p50/p95) and top-5 agreement of the retrieval engines.

Engines: ``bm25`` (the default in-process backend, tantivy; ``bm25-nostem`` without stemming), ``bm25s`` (the
pure-Python alternative, measured raw), ``lucene`` (pyserini) and ``dense`` (faiss + all-MiniLM-L6-v2, one torch thread;
latency includes encoding the query). Each engine is built in one fresh process and queried in another, so RSS figures
are its own.

Corpora: ``shared`` is the distractor corpus of the HotpotQA samples in ../shared/data/hotpotqa (~10.8k paragraphs;
queries are the questions); ``synthetic`` is a generated corpus (``gen``) with a Zipfian vocabulary: English function
words on top, then ~300k generated words, so frequent non-stop words have long posting lists; each passage has a few
topic words, and queries mix topic words with common words from the passage.

    mkdir -p runs && python benchmarks/retrieval_bench.py gen --docs 1000000 --out runs/synth1m.jsonl
    python benchmarks/retrieval_bench.py compare --corpus shared --engines bm25 bm25s lucene dense --dense-docs 1000
    python benchmarks/retrieval_bench.py compare --corpus runs/synth1m.jsonl --engines bm25 lucene
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentgym_r1.retrieval import Document, hotpotqa_paragraphs, iter_corpus  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "hotpotqa"
STOP = [
    "the",
    "of",
    "and",
    "in",
    "to",
    "a",
    "is",
    "was",
    "for",
    "on",
    "as",
    "by",
    "with",
    "he",
    "it",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
    "this",
    "that",
    "be",
    "or",
    "had",
    "not",
    "but",
    "also",
    "first",
    "its",
    "has",
    "one",
    "their",
    "after",
    "who",
    "they",
    "have",
    "new",
    "been",
    "other",
    "all",
    "she",
    "her",
    "two",
    "into",
]


# ---------------------------------------------------------------- corpora and queries


def generate(n_docs: int, out: Path, seed: int = 0, vocab_size: int = 300_000) -> None:
    """Write a synthetic JSONL corpus ({"id", "title", "text"}) and its queries (``out`` + ``.queries.json``)."""
    rng = np.random.default_rng(seed)
    syll = np.array(
        [
            "ka",
            "lo",
            "mi",
            "ne",
            "ru",
            "ta",
            "vo",
            "zi",
            "pe",
            "sa",
            "do",
            "gu",
            "ri",
            "mo",
            "te",
            "la",
            "an",
            "or",
            "el",
            "is",
            "um",
            "ex",
            "ba",
            "fi",
            "ho",
            "ju",
            "ke",
            "ny",
            "qu",
            "wa",
        ]
    )
    lengths = rng.integers(2, 5, vocab_size)
    words = ["".join(syll[rng.integers(0, len(syll), n)]) for n in lengths]
    vocab = list(dict.fromkeys(STOP + words))
    weights = 1.0 / (np.arange(len(vocab)) + 2.7)  # Zipf-Mandelbrot
    cdf = np.cumsum(weights / weights.sum())
    queries: list[str] = []
    with out.open("w", encoding="utf-8") as f:
        for start in range(0, n_docs, 10_000):
            size = min(10_000, n_docs - start)
            lens = rng.integers(60, 140, size)
            ids = np.searchsorted(cdf, rng.random(int(lens.sum())))
            topics = rng.integers(2000, len(vocab), (size, 4))
            offs = np.concatenate([[0], np.cumsum(lens)])
            for i in range(size):
                body = [vocab[j] for j in ids[offs[i] : offs[i + 1]]]
                for t in topics[i]:
                    for pos in rng.integers(0, len(body), 2):
                        body[pos] = vocab[t]
                title = " ".join(vocab[t].capitalize() for t in topics[i][:2])
                f.write(json.dumps({"id": str(start + i), "title": title, "text": " ".join(body)}) + "\n")
                if len(queries) < 2000 and rng.random() < 2000 / n_docs * 1.2:
                    common = [body[p] for p in rng.integers(0, len(body), rng.integers(2, 7))]
                    queries.append(" ".join([vocab[topics[i][0]], *common, vocab[topics[i][2]]]))
    Path(str(out) + ".queries.json").write_text(json.dumps(queries))


def load_shared() -> tuple[list[Document], list[str]]:
    records = [
        json.loads(line)
        for f in sorted(SHARED.glob("hotpot_dev_distractor_sample_*.jsonl"))
        for line in f.open(encoding="utf-8")
        if line.strip()
    ]
    return hotpotqa_paragraphs(records), [r["question"] for r in records]


def corpus_and_queries(corpus: str) -> tuple[list[Document] | Path, list[str]]:
    if corpus == "shared":
        return load_shared()
    path = Path(corpus)
    return path, json.loads(Path(str(path) + ".queries.json").read_text())


# ---------------------------------------------------------------- one engine in one process


def _rss_mb(field: str = "VmRSS") -> float:
    """Resident memory; ``RssAnon`` leaves out the memory-mapped index files (page cache, shared and reclaimable)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def build(engine: str, corpus: str, index_dir: Path, dense_docs: int) -> dict:
    docs, _ = corpus_and_queries(corpus)
    t0 = time.perf_counter()
    if engine == "bm25s":
        import bm25s

        items = docs if isinstance(docs, list) else list(iter_corpus(docs))
        tokens = bm25s.tokenize([d.contents for d in items], stopwords="en", show_progress=False)
        model = bm25s.BM25()
        model.index(tokens, show_progress=False)
        model.save(str(index_dir), corpus=None)
        (index_dir / "ids.json").write_text(json.dumps([d.id for d in items]))
        (index_dir / "vocab.json").write_text(json.dumps(tokens.vocab))
    else:
        from agentgym_r1.retrieval import build_retriever

        opts: dict = {"stem": False} if engine == "bm25-nostem" else {}
        if engine == "dense":
            from agentgym_r1.retrieval.dense import packaged_minilm_path

            opts["model"] = packaged_minilm_path()
            opts["threads"] = 1
            items = docs if isinstance(docs, list) else list(iter_corpus(docs))
            docs = items[:dense_docs]
        build_retriever(engine.split("-")[0], docs, index_dir, cache=False, **opts).close()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "build_s": time.perf_counter() - t0,
        "build_cpu_s": own.ru_utime + own.ru_stime,
        "build_child_cpu_s": kids.ru_utime + kids.ru_stime,
        "build_peak_rss_mb": _peak_mb(),
        "build_child_peak_rss_mb": _peak_mb(resource.RUSAGE_CHILDREN),
    }


def query(engine: str, corpus: str, index_dir: Path, n_queries: int) -> dict:
    _, queries = corpus_and_queries(corpus)
    queries = queries[:n_queries]
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    if engine == "bm25s":
        import bm25s

        model = bm25s.BM25.load(str(index_dir), mmap=True)
        ids = json.loads((index_dir / "ids.json").read_text())
        vocab = json.loads((index_dir / "vocab.json").read_text())

        def search(q: str) -> list[str]:
            toks = [
                vocab[w]
                for w in bm25s.tokenize(q, stopwords="en", return_ids=False, show_progress=False)[0]
                if w in vocab
            ]
            if not toks:
                return []
            found, _ = model.retrieve([toks], k=5, show_progress=False, n_threads=1)
            return [ids[int(j)] for j in found[0]]
    else:
        from agentgym_r1.retrieval import load_retriever

        retriever = load_retriever(index_dir, cache=False, **({"threads": 1} if engine == "dense" else {}))

        def search(q: str) -> list[str]:
            return [h.doc.id for h in retriever.search(q, 5)]

    load_s = time.perf_counter() - t0
    for q in queries[:20]:  # warm-up
        search(q)
    lat, top5 = [], []
    for q in queries:
        t = time.perf_counter()
        top5.append(search(q))
        lat.append((time.perf_counter() - t) * 1e3)
    return {
        "load_s": load_s,
        "queries": len(queries),
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": float(np.percentile(lat, 95)),
        "p99_ms": float(np.percentile(lat, 99)),
        "rss_after_load_and_queries_mb": _rss_mb(),
        "anon_rss_after_mb": _rss_mb("RssAnon"),
        "rss_before_load_mb": rss0,
        "top5": top5,
    }


# ---------------------------------------------------------------- driver


def _child(phase: str, engine: str, args: argparse.Namespace, index_dir: Path) -> dict:
    cmd = [
        sys.executable,
        __file__,
        phase,
        "--engine",
        engine,
        "--corpus",
        args.corpus,
        "--index-dir",
        str(index_dir),
        "--queries",
        str(args.queries),
        "--dense-docs",
        str(args.dense_docs),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{phase} {engine} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace) -> None:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="retrieval-bench-", dir=args.work_dir) as tmp:
        for engine in args.engines:
            index_dir = Path(tmp) / engine
            index_dir.mkdir()
            results[engine] = {**_child("build", engine, args, index_dir), **_child("query", engine, args, index_dir)}
            r = results[engine]
            print(
                f"{engine:7s} build {r['build_s']:7.1f} s (CPU {r['build_cpu_s'] + r['build_child_cpu_s']:6.1f} s)  "
                f"peak RSS {r['build_peak_rss_mb']:7.0f} MB "
                f"(indexer subprocess {r['build_child_peak_rss_mb']:5.0f} MB)  load {r['load_s']:5.2f} s  "
                f"query p50 {r['p50_ms']:7.3f} ms  p95 {r['p95_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  "
                f"RSS after queries {r['rss_after_load_and_queries_mb']:6.0f} MB "
                f"(anonymous {r['anon_rss_after_mb']:5.0f} MB)  "
                f"({r['queries']} queries)",
                flush=True,
            )
    names = [n for n in results if n != "dense"]  # dense indexes a subset: its top-5 are not comparable
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pairs = list(zip(results[a]["top5"], results[b]["top5"], strict=True))
            overlap = np.mean([len(set(x) & set(y)) / 5 for x, y in pairs])
            top1 = np.mean([bool(x) and bool(y) and x[0] == y[0] for x, y in pairs])
            print(f"top-5 agreement {a} vs {b}: overlap {overlap:.3f}, same top-1 {top1:.3f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({k: {m: v for m, v in r.items() if m != "top5"} for k, r in results.items()}, indent=2)
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="generate a synthetic corpus and its queries")
    g.add_argument("--docs", type=int, default=1_000_000)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--seed", type=int, default=0)
    for name in ("compare", "build", "query"):
        c = sub.add_parser(name)
        c.add_argument("--corpus", default="shared", help="'shared' or a JSONL made by gen")
        c.add_argument("--queries", type=int, default=1000)
        c.add_argument("--dense-docs", type=int, default=1000, help="dense: index only the first N passages")
        if name == "compare":
            c.add_argument("--engines", nargs="+", default=["bm25", "bm25s", "lucene", "dense"])
            c.add_argument("--work-dir", default=None, help="where the temporary indexes go")
            c.add_argument("--json", default=None, help="also write the figures to this file")
        else:
            c.add_argument("--engine", required=True)
            c.add_argument("--index-dir", type=Path, required=True)
    args = p.parse_args()
    if args.cmd == "gen":
        t = time.perf_counter()
        generate(args.docs, args.out, args.seed)
        print(f"wrote {args.docs} passages to {args.out} in {time.perf_counter() - t:.0f} s")
    elif args.cmd == "compare":
        compare(args)
    elif args.cmd == "build":
        print(json.dumps(build(args.engine, args.corpus, args.index_dir, args.dense_docs)))
    else:
        print(json.dumps(query(args.engine, args.corpus, args.index_dir, args.queries)))


if __name__ == "__main__":
    main()
