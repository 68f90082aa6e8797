"""After training, on rank 0: the new adapter (challenger) and the baseline (the champion's adapter loaded
beside it, or the base model with the adapter switched off) on the same first N held-out samples: loss on
the reference descriptions, greedy descriptions, and their ROUGE-L (torchmetrics, equal to rouge-score) and BLEU (sacrebleu)
against the references."""

from __future__ import annotations

import dataclasses
import logging
import statistics

from functions.core.config import RunConfig
from functions.core.result import Evaluation, Scores
from trainer.generate import answer
from trainer.storage import local_folder

log = logging.getLogger("raytune.trainer")
CHAMPION_ADAPTER = "champion"


@dataclasses.dataclass
class Sample:
    """One evaluation sample as the report shows it."""

    image: object  # PIL image
    product: str
    category: str
    reference: str
    challenger: str = ""
    baseline: str = ""
    challenger_rouge: float = 0.0
    baseline_rouge: float = 0.0


def _loss(model, collator, rows: list[dict]) -> float:
    """Mean per-sample loss on the reference descriptions (the training loss, labels as in training)."""
    import torch

    device = next(model.parameters()).device
    losses = []
    with torch.inference_mode():
        for row in rows:
            batch = {k: v.to(device) for k, v in collator([row]).items()}
            batch["pixel_values"] = batch["pixel_values"].to(model.dtype)
            losses.append(float(model(**batch).loss))
    return statistics.fmean(losses)


def rouge_l(reference: str, output: str) -> float:
    """ROUGE-L F-measure with Porter stemming, as Google's rouge-score computes it: torchmetrics' implementation
    (a wheel; rouge-score ships only a source archive that every node would build for dependencies: pip),
    held equal to rouge-score in tests/trainer/test_evaluation.py."""
    from torchmetrics.functional.text.rouge import rouge_score

    return float(rouge_score(output, reference, rouge_keys="rougeL", use_stemmer=True)["rougeL_fmeasure"])


def _score(model, processor, collator, rows: list[dict], cfg: RunConfig) -> tuple[Scores, list[str], list[float]]:
    import sacrebleu

    spec = cfg.dataset
    outputs = [
        answer(
            model,
            processor,
            cfg.prompts,
            row[spec.product_field],
            row[spec.category_field],
            row[spec.image_field],
            cfg.evaluation.max_new_tokens,
        )
        for row in rows
    ]
    references = [row[spec.answer_field] for row in rows]
    rouge = [rouge_l(ref, out) for ref, out in zip(references, outputs, strict=True)]
    bleu = sacrebleu.corpus_bleu(outputs, [references]).score
    scores = Scores(eval_loss=_loss(model, collator, rows), rougeL=statistics.fmean(rouge), bleu=bleu)
    return scores, outputs, rouge


def evaluate(model, processor, collator, eval_set, cfg: RunConfig, champion: dict | None):
    """(Evaluation, samples): `model` is the trained PeftModel; `champion` the one at submission or None."""
    spec = cfg.dataset
    rows = [eval_set[i] for i in range(min(cfg.evaluation.samples, len(eval_set)))]
    model.eval()
    challenger, challenger_out, challenger_rouge = _score(model, processor, collator, rows, cfg)
    if champion:
        model.load_adapter(local_folder(champion["adapter_path"]), adapter_name=CHAMPION_ADAPTER)
        model.set_adapter(CHAMPION_ADAPTER)
        try:
            baseline, baseline_out, baseline_rouge = _score(model, processor, collator, rows, cfg)
        finally:
            model.set_adapter("default")
            model.delete_adapter(CHAMPION_ADAPTER)
    else:
        with model.disable_adapter():
            baseline, baseline_out, baseline_rouge = _score(model, processor, collator, rows, cfg)
    samples = [
        Sample(
            image=row[spec.image_field],
            product=row[spec.product_field],
            category=row[spec.category_field],
            reference=row[spec.answer_field],
            challenger=c,
            baseline=b,
            challenger_rouge=cr,
            baseline_rouge=br,
        )
        for row, c, b, cr, br in zip(rows, challenger_out, baseline_out, challenger_rouge, baseline_rouge, strict=True)
    ]
    evaluation = Evaluation(
        samples=len(rows),
        challenger=challenger,
        baseline=baseline,
        baseline_kind="champion" if champion else "base",
        champion_run_id=champion["run_id"] if champion else None,
    )
    log.info("evaluation on %d held-out samples: %s", len(rows), evaluation.model_dump_json())
    return evaluation, samples
