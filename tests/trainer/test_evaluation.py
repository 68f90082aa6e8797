"""Evaluation, report and export on the tiny Gemma 3, in-process (no Ray): the challenger against the base
model and against a champion adapter, report.html parsed with every image decoded, the merged export
loaded back as a plain model, the stable held-out split."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.core.config import DatasetSpec, RunConfig
from tests.fakes.http import serve_in_thread
from tests.reports import ReportPage
from trainer import data, export, model, report, tiny
from trainer.collator import VisionSFTCollator
from trainer.evaluate import evaluate

CONFIG = RunConfig.model_validate(
    {
        "name": "nightly-products",
        "model": {"id": "tiny://gemma3", "dtype": "float32"},
        "dataset": {"id": "tiny://products", "max_samples": 40, "eval_fraction": 0.25},
        "training": {"max_length": 256},
        "scaling": {"nodes": 1, "gpus_per_node": 0},
        "evaluation": {"samples": 3, "max_new_tokens": 8},
        "export": {"merged": True},
    }
)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from peft import get_peft_model

    source = tiny.save(tmp_path_factory.mktemp("tiny"))
    processor = model.load_processor(CONFIG.model, str(source))
    peft = get_peft_model(model.load_model(CONFIG.model, str(source)), model.lora_config(CONFIG.lora))
    collator = VisionSFTCollator(processor, CONFIG.dataset, CONFIG.prompts, CONFIG.training.max_length)
    _, held_out = data.split(data.load(CONFIG.dataset), CONFIG.dataset)
    return source, processor, peft, collator, held_out


def test_challenger_against_the_base_model_then_a_champion_and_the_report(tuned, tmp_path):
    _, processor, peft, collator, held_out = tuned
    evaluation, samples = evaluate(peft, processor, collator, held_out, CONFIG, None)
    assert evaluation.samples == len(samples) == 3 and evaluation.baseline_kind == "base"
    for scores in (evaluation.challenger, evaluation.baseline):
        assert scores.eval_loss and scores.eval_loss > 0 and 0 <= scores.rougeL <= 1 and 0 <= scores.bleu <= 100
    # A fresh LoRA adapter starts as the identity (B = 0): the same loss as the base model.
    assert evaluation.challenger.eval_loss == pytest.approx(evaluation.baseline.eval_loss, rel=1e-5)

    champion_dir = tmp_path / "champion"
    peft.save_pretrained(champion_dir)
    against, _ = evaluate(
        peft, processor, collator, held_out, CONFIG, {"run_id": "run-1", "adapter_path": str(champion_dir)}
    )
    assert against.baseline_kind == "champion" and against.champion_run_id == "run-1"
    assert list(peft.peft_config) == ["default"], "the champion's adapter is unloaded after the evaluation"

    page = ReportPage(report.render("run-2", CONFIG, evaluation, samples))
    assert {"summary", "metrics", "samples"} <= set(page.ids)
    assert len(page.images) == 3 and all(max(image.size) <= report.THUMBNAIL_PX for image in page.images)
    text = " ".join(page.text)
    assert samples[0].product in text and samples[0].reference in text and "rougeL (decides)" in text


def test_merged_export_loads_as_a_plain_model(tuned, tmp_path):
    from transformers import AutoModelForImageTextToText

    source, processor, peft, _, _ = tuned
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    processor.save_pretrained(adapter)
    merged = export.merged(adapter, str(source), CONFIG, tmp_path / "merged")
    assert list(merged.glob("*.safetensors")) and (merged / "processor_config.json").exists()
    plain = AutoModelForImageTextToText.from_pretrained(merged)
    assert not hasattr(plain, "peft_config")


def test_held_out_samples_stay_held_out_as_the_data_grows():
    spec = DatasetSpec(id="tiny://products", eval_fraction=0.25)
    small = tiny.product_dataset(40, seed=1)
    grown = tiny.product_dataset(80, seed=1)  # the same first 40 rows, and 40 new ones
    _, held_small = data.split(small, spec)
    train_grown, held_grown = data.split(grown, spec)
    names = set(held_small["Product Name"])
    assert names <= set(held_grown["Product Name"]), "a held-out sample never moves into training"
    assert not names & set(train_grown["Product Name"])
    assert 0 < len(held_grown) < len(grown)


def test_the_merged_export_is_pushed_to_a_private_hub_repo_in_one_commit(tuned, tmp_path, monkeypatch):
    """export.hub_repo through huggingface_hub's real client, against a Hub stand-in (HF_ENDPOINT)."""
    from tests.fakes.hub import FakeHubUploads

    source, processor, peft, _, _ = tuned
    adapter = tmp_path / "adapter"
    peft.save_pretrained(adapter)
    processor.save_pretrained(adapter)
    folder = export.merged(adapter, str(source), CONFIG, tmp_path / "merged")
    hub = FakeHubUploads(token="hf_write_token")
    serve_in_thread(hub)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_write_token")
    try:
        revision = export.push(folder, "team/products-merged", "raytune r-1: tiny merged")
        export.push(folder, "team/products-merged", "raytune r-2: tiny merged")  # the repo exists: a new commit
    finally:
        hub.shutdown()
    repo = hub.repos["team/products-merged"]
    assert repo.private and not hub.refused
    first, second = repo.commits
    assert revision == first.oid and first.summary == "raytune r-1: tiny merged"
    local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert first.files == local and second.files == local
    assert "model.safetensors" in local and "processor_config.json" in local


def test_a_push_with_a_wrong_token_fails_and_says_so(tuned, tmp_path, monkeypatch):
    from huggingface_hub.errors import HfHubHTTPError

    from tests.fakes.hub import FakeHubUploads

    hub = FakeHubUploads(token="hf_write_token")
    serve_in_thread(hub)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_read_only")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    try:
        with pytest.raises(HfHubHTTPError) as err:
            export.push(tmp_path, "team/products-merged", "m")
    finally:
        hub.shutdown()
    assert "401" in str(err.value) and "hf_read_only" not in str(err.value) and not hub.repos


WORDS = st.sampled_from(
    ["running", "runs", "ran", "dogs", "dog's", "the", "A", "fence", "fences", "jumping", "quick", "SEO", "2", "mobile"]
)
TEXT = st.lists(st.one_of(WORDS, st.text(max_size=6)), max_size=14).map(" ".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reference=TEXT, output=TEXT)
def test_rouge_l_is_google_rouge_score(reference, output):
    """The reported ROUGE-L (torchmetrics, a wheel) equals Google's rouge-score with the stemmer on, on
    stemmable words, punctuation, case and arbitrary text."""
    from rouge_score import rouge_scorer

    from trainer.evaluate import rouge_l

    expected = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, output)["rougeL"].fmeasure
    assert rouge_l(reference, output) == pytest.approx(expected, abs=1e-6)
