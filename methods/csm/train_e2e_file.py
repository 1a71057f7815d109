"""Train CSM-e2e from an exported file, on any machine (a GPU one, say):

    python -m methods.csm.train_e2e_file csm_e2e_passage_nq.pt OUT --base PATH [--device cuda] [--time-budget-s 300]

``python -m methods.csm.train --config-name train/csm_e2e e2e.export=DIR`` writes one task's training lists
(question, units, gold aliases), their frozen pair features, their token ids under the shared prompt (with the
unit of every token), the held-back lists with their oracle CI values and features, and the settings to one file.
This command needs torch, transformers (gguf for a ``.gguf`` base) and this repository's code; no data, encoder
or label cache. It writes ``OUT/head.safetensors`` + ``config.json`` (the epoch best on the held-back figure the
settings name, as CSM-st selects) and ``OUT/report.json`` (settings, per-step history, per-epoch validation,
device, the export's digest); ``e2e.import_from=OUT`` checks the digest against the lists it builds and installs
the head with figures recomputed on that machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from methods.csm.head import CSMHead, save_head
from methods.csm.train_e2e import Encoded, SoftMaskLM
from methods.csm.train_fit import heldout_figures, train_e2e
from methods.csm.train_rebalance import Sample

KIND = "csm_e2e"


def digest(base: str, settings: dict[str, Any], train: Sequence[dict], held: Sequence[dict]) -> str:
    """What a head must have been trained on to be imported: the base, the settings and every list's text, token
    ids and (held back) oracle values; features are left out (recomputed on import, equal up to float noise)."""
    h = hashlib.sha256(json.dumps({"kind": KIND, "base": base, "settings": settings}, sort_keys=True).encode())
    for r in train:
        h.update(
            json.dumps(
                [r["question"], r["texts"], r["answers"], r["ids"].tolist(), r["unit_of"].tolist(), r["prompt_len"]]
            ).encode()
        )
    h.update(b"|")
    for r in held:
        h.update(json.dumps([r["question"], r["texts"], [round(v, 6) for v in r["values"]]]).encode())
    return h.hexdigest()


def build_export(
    base: str, settings: dict[str, Any], samples: Sequence[Sample], held: Sequence[Sample], feats, lm: SoftMaskLM
) -> dict[str, Any]:
    """The file's content: training lists encoded by ``lm`` (its tokenizer only) and held-back lists."""
    train = []
    for s in samples:
        e = lm.encode(s.question, s.texts, s.answers[0])
        train.append(
            {
                "question": s.question,
                "answers": list(s.answers),
                "texts": list(s.texts),
                "feats": feats(s).float().cpu(),
                "ids": e.ids.to(torch.int32),
                "unit_of": e.unit_of.to(torch.int16),
                "prompt_len": e.prompt_len,
            }
        )
    held_rows = [
        {
            "question": s.question,
            "texts": list(s.texts),
            "values": [float(v) for v in s.values],
            "feats": feats(s).float().cpu(),
        }
        for s in held
    ]
    return {
        "kind": KIND,
        "base": base,
        "settings": settings,
        "train": train,
        "held": held_rows,
        "digest": digest(base, settings, train, held_rows),
    }


def write_export(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(doc, path)
    return path


def read_report(out: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """``OUT/report.json`` of a run of this module; refused unless it trained on exactly ``doc``'s lists."""
    report = json.loads((Path(out) / "report.json").read_text())
    if report.get("export_digest") != doc["digest"]:
        raise ValueError(
            f"{out} was trained on other lists or settings than this run builds (digest "
            f"{str(report.get('export_digest'))[:12]} != {doc['digest'][:12]}): export and train again"
        )
    return report


def _lists(doc: dict[str, Any]) -> tuple[list[Sample], list[Sample], list[Encoded], Any]:
    train = [Sample(r["question"], list(r["answers"]), list(r["texts"]), []) for r in doc["train"]]
    held = [Sample(r["question"], [], list(r["texts"]), list(r["values"])) for r in doc["held"]]
    enc = [Encoded(r["ids"].long(), r["unit_of"].long(), int(r["prompt_len"]), len(r["texts"])) for r in doc["train"]]
    by_id = {id(s): r["feats"] for s, r in zip(train + held, doc["train"] + doc["held"], strict=True)}
    return train, held, enc, lambda s: by_id[id(s)]


def train_from_doc(
    doc: dict[str, Any], model, max_steps: int | None = None, time_budget_s: float | None = None
) -> tuple[CSMHead, dict[str, Any]]:
    """Train the head of ``doc`` through ``model`` (frozen); returns the head (on the CPU) and the report."""
    t0 = time.perf_counter()
    st = doc["settings"]
    e, h, o = st["e2e"], st["head"], st["optim"]
    train, held, enc, feats = _lists(doc)
    dim = int(doc["train"][0]["feats"].shape[1])
    torch.manual_seed(int(st["seed"]))
    head = CSMHead(dim, int(h["layers"]), int(h["heads"]), int(h["ffn_dim"]), float(h["dropout"]))
    lm = SoftMaskLM(model, None, e["gate"])
    metric = st.get("select_epoch")

    def validate(hd):
        return heldout_figures(hd, held, feats)[metric] if held and metric else None

    steps = e.get("max_steps") if max_steps is None else max_steps
    # CUDA's memory-efficient SDPA kernel cannot back-propagate into an additive mask of unaligned length (the
    # gate's gradient flows through it): the math kernel, as on the CPU
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]) if lm.device.type == "cuda" else nullcontext():
        history = train_e2e(
            head,
            train,
            feats,
            lm,
            int(e["epochs"]),
            int(e["batch_size"]),
            float(e["lr"]),
            float(o["weight_decay"]),
            float(o["warmup"]),
            float(e["lambda_nec"]),
            float(e["temperature"]),
            steps,
            int(st["seed"]),
            encoded=enc,
            validate=validate,
            deadline=t0 + time_budget_s if time_budget_s else None,
        )
    train_s = sum(r["seconds"] for r in history)
    report = {
        "kind": KIND,
        "export_digest": doc["digest"],
        "base": doc["base"],
        "settings": st,
        "train_lists": len(train),
        "held_lists": len(held),
        "steps": len(history),
        "steps_for_schedule": int(e["epochs"]) * -(-len(train) // int(e["batch_size"])),
        "train_seconds": train_s,
        "seconds_per_step": train_s / max(len(history), 1),
        "device": torch.cuda.get_device_name() if lm.device.type == "cuda" else str(lm.device),
        "time_budget_s": time_budget_s,
        "history": history,
        "heldout": heldout_figures(head, held, feats) if held else {},
        "wall_seconds": time.perf_counter() - t0,
    }
    return head.cpu(), report


def head_extra(settings: dict[str, Any]) -> dict[str, Any]:
    """The ``config.json`` entries of an e2e head (as ``methods.csm.train`` writes them)."""
    return {
        "encoder": settings["encoder"],
        "granularity": settings["granularity"],
        "mode": "e2e",
        "label_temperature": settings["label_temperature"],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m methods.csm.train_e2e_file", description=__doc__.split("\n\n")[0])
    ap.add_argument("export", type=Path, help="the file written by e2e.export=DIR")
    ap.add_argument("out", type=Path)
    ap.add_argument("--base", required=True, help="the generator: a .gguf file, a local folder or a model ref")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-steps", type=int, default=None, help="override the exported e2e.max_steps")
    ap.add_argument(
        "--time-budget-s",
        type=float,
        default=None,
        help="stop after the step that passes this many seconds (validated there; the report says so)",
    )
    args = ap.parse_args(argv)
    from harness.lm.sft_file import load_base

    doc = torch.load(args.export, weights_only=True)
    if doc.get("kind") != KIND:
        raise SystemExit(f"{args.export}: not a CSM-e2e export (kind={doc.get('kind')!r})")
    model = load_base(args.base, args.device)
    head, report = train_from_doc(doc, model, args.max_steps, args.time_budget_s)
    report["argv"] = [str(a) for a in (argv if argv is not None else sys.argv[1:])]
    args.out.mkdir(parents=True, exist_ok=True)
    save_head(head, args.out, head_extra(doc["settings"]))
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("steps", "seconds_per_step", "device", "heldout")}, indent=1))
    return report


if __name__ == "__main__":
    main()
