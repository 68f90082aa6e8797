"""A dataset of your own, in each layout docs/datasets.md documents, through the trainer's real loading (the
`datasets` library's own builders): every row's image decodes, the fields are text; and bad data fails in the
preflight naming the row and the column, before any worker starts."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from functions.core.config import DatasetSpec, ModelSpec
from trainer import data, preflight, tiny

FIELDS = ("Product Name", "Category", "description")


def rows(count: int = 6) -> list[dict]:
    return tiny.product_rows(count, seed=4)


def jpeg(image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG")
    return buffer.getvalue()


def with_image_files(folder, items) -> list[dict]:
    """The rows with their images as files under folder/images, named relative to folder."""
    (folder / "images").mkdir(parents=True)
    out = []
    for index, row in enumerate(items):
        name = f"images/{index}.jpg"
        (folder / name).write_bytes(jpeg(row["image"]))
        out.append({**{k: row[k] for k in FIELDS}, "image": name})
    return out


def parquet_from_datasets(folder):
    tiny.product_dataset(6, seed=4).to_parquet(str(folder / "train.parquet"))
    return folder / "train.parquet"


def parquet_from_pyarrow_structs(folder):
    """A parquet written by pyarrow with the image as a {bytes, path} struct (how an HF Image column looks
    without the `datasets` metadata): failed after 281 s with "'dict' object has no attribute 'convert'"."""
    items = rows()
    table = pa.table(
        {
            **{k: [r[k] for r in items] for k in FIELDS},
            "image": [{"bytes": jpeg(r["image"]), "path": f"{i}.jpg"} for i, r in enumerate(items)],
        }
    )
    pq.write_table(table, folder / "products.parquet")
    return folder / "products.parquet"


def parquet_from_pandas_bytes(folder):
    import pandas as pd

    items = rows()
    frame = pd.DataFrame({**{k: [r[k] for r in items] for k in FIELDS}, "image": [jpeg(r["image"]) for r in items]})
    frame.to_parquet(folder / "products.parquet")
    return folder / "products.parquet"


def jsonl_with_relative_paths(folder):
    """Failed after 260 s: every local file was read as parquet."""
    lines = [json.dumps(r) for r in with_image_files(folder, rows())]
    (folder / "products.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "products.jsonl"


def csv_with_relative_paths(folder):
    import csv

    items = with_image_files(folder, rows())
    with open(folder / "products.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[*FIELDS, "image"])
        writer.writeheader()
        writer.writerows(items)
    return folder / "products.csv"


def image_folder_with_metadata(folder):
    items = with_image_files(folder, rows())
    lines = [json.dumps({**{k: r[k] for k in FIELDS}, "file_name": r["image"]}) for r in items]
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def saved_with_save_to_disk(folder):
    """Issue 40: the format Hugging Face users save most. It crashed `validate` with a ~50-line traceback and failed
    the run after ~20 s with DatasetGenerationError (dataset_info.json and state.json read as data)."""
    tiny.product_dataset(6, seed=4).save_to_disk(str(folder / "saved"))
    return folder / "saved"


def dataset_dict_saved_with_save_to_disk(folder):
    import datasets

    whole = tiny.product_dataset(8, seed=4)
    datasets.DatasetDict({"train": whole.select(range(6)), "test": whole.select(range(6, 8))}).save_to_disk(
        str(folder / "saved-dict")
    )
    return folder / "saved-dict"


LAYOUTS = {
    "a Dataset saved with save_to_disk": saved_with_save_to_disk,
    "a DatasetDict saved with save_to_disk (its train split)": dataset_dict_saved_with_save_to_disk,
    "parquet from datasets (Image feature)": parquet_from_datasets,
    "parquet from pyarrow ({bytes, path} structs)": parquet_from_pyarrow_structs,
    "parquet from pandas (image bytes)": parquet_from_pandas_bytes,
    "JSONL with image paths relative to it": jsonl_with_relative_paths,
    "CSV with image paths relative to it": csv_with_relative_paths,
    "image folder with metadata.jsonl": image_folder_with_metadata,
}


@pytest.fixture(autouse=True)
def data_folder(tmp_path):
    (tmp_path / "data").mkdir()


def tiny_model() -> ModelSpec:
    return ModelSpec(id="tiny://gemma3")


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_each_documented_layout_loads_with_its_images(layout, tmp_path, monkeypatch):
    location = layout(tmp_path / "data")
    monkeypatch.chdir(tmp_path)  # relative image paths start from the data file's folder, not from here
    spec = DatasetSpec(id=str(location))
    dataset = data.load(spec)
    assert len(dataset) == 6
    for row in dataset:
        assert row["image"].convert("RGB").size[0] > 0 and all(isinstance(row[k], str) and row[k] for k in FIELDS)
    preflight.check(tiny_model(), spec)  # the format, the columns and the first rows' images


def test_a_missing_image_fails_the_preflight_naming_the_row_and_column(tmp_path):
    folder = tmp_path / "data"
    path = jsonl_with_relative_paths(folder)
    (folder / "images" / "2.jpg").unlink()
    spec = DatasetSpec(id=str(path))
    # rows 0 and 1 decode; row 2's file is gone
    with pytest.raises(
        preflight.PreflightError, match=r"row 2 \(counting from 0\), column 'image': image .*2.jpg: FileNotFoundError"
    ):
        preflight.check(tiny_model(), spec)


def test_every_row_is_checked_and_a_bad_one_is_named_with_its_file(tmp_path):
    """Issue 40: only the first 4 rows were decoded, so a bad image further on (or in a nightly's new shard) failed
    the training on the workers as `UnidentifiedImageError: ... <_io.BytesIO object at 0x...>`, naming nothing,
    after restarting the worker group scaling.max_failures times."""
    items = rows(40)
    folder = tmp_path / "data"
    for shard in range(2):
        part = items[shard * 20 : (shard + 1) * 20]
        images = [jpeg(r["image"]) for r in part]
        if shard == 1:
            images[13] = b"not an image at all"  # row 33 of the dataset, row 13 of the second shard
        table = pa.table({**{k: [r[k] for r in part] for k in FIELDS}, "image": images})
        pq.write_table(table, folder / f"shard-{shard}.parquet")
    spec = DatasetSpec(id=str(folder))
    with pytest.raises(preflight.PreflightError) as failed:
        preflight.check(tiny_model(), spec)
    assert str(failed.value) == (
        f"dataset {folder}: row 33 (counting from 0; row 13 of shard-1.parquet), column 'image': the image bytes "
        "stored in the row: UnidentifiedImageError: cannot identify image file"
    )
    items[37]["description"] = "  "
    part = items[20:]
    table = pa.table({**{k: [r[k] for r in part] for k in FIELDS}, "image": [jpeg(r["image"]) for r in part]})
    pq.write_table(table, folder / "shard-1.parquet")
    with pytest.raises(
        ValueError, match=r"row 37 \(counting from 0; row 17 of shard-1.parquet\), column 'description' is"
    ):
        data.check_rows(spec)
    items[37]["description"] = "fine"
    table = pa.table({**{k: [r[k] for r in part] for k in FIELDS}, "image": [jpeg(r["image"]) for r in part]})
    pq.write_table(table, folder / "shard-1.parquet")
    assert data.check_rows(spec) == 40


def test_a_jpeg_cut_short_is_found_before_training_naming_its_row(tmp_path):
    """Issue 53: a JPEG whose body stops partway has a valid header: verify() passed it, and the workers failed with
    `OSError: image file is truncated`, naming nothing, on every restart. Every image is decoded whole now."""
    items = rows(6)
    images = [jpeg(r["image"]) for r in items]
    images[4] = images[4][: len(images[4]) * 5 // 6]  # its last rows of pixels gone
    table = pa.table({**{k: [r[k] for r in items] for k in FIELDS}, "image": images})
    pq.write_table(table, tmp_path / "data" / "cut.parquet")
    with pytest.raises(data.DataError) as failed:
        data.check_rows(DatasetSpec(id=str(tmp_path / "data")))
    said = str(failed.value)
    assert "row 4 (counting from 0; row 4 of cut.parquet), column 'image': the image bytes stored in the row" in said
    assert "truncated" in said


def test_a_column_that_holds_no_images_is_named(tmp_path):
    items = rows(3)
    table = pa.table({**{k: [r[k] for r in items] for k in FIELDS}, "image": [1, 2, 3]})
    pq.write_table(table, tmp_path / "data" / "numbers.parquet")
    with pytest.raises(ValueError, match="column 'image' holds"):
        data.load(DatasetSpec(id=str(tmp_path / "data" / "numbers.parquet")))


def test_mixed_or_unknown_files_are_refused_with_the_layouts(tmp_path):
    (tmp_path / "data" / "a.parquet").write_bytes(b"")
    (tmp_path / "data" / "b.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match=r"mixes \['json', 'parquet'\] files"):
        data.load(DatasetSpec(id=str(tmp_path / "data")))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="no data files of a known kind"):
        data.load(DatasetSpec(id=str(tmp_path / "notes")))


def test_validate_reads_a_local_dataset_before_anything_runs(tmp_path, capsys):
    from functions.cli import main as cli

    path = jsonl_with_relative_paths(tmp_path / "data")
    config = tmp_path / "mine.json"
    config.write_text(json.dumps({"dataset": {"id": str(path)}}))
    assert cli(["validate", str(config)]) == 0
    (tmp_path / "data" / "images" / "0.jpg").unlink()
    assert cli(["validate", str(config)]) == 2
    assert "row 0 (counting from 0), column 'image': image " in capsys.readouterr().err


def test_validate_names_a_folder_it_cannot_read_without_a_traceback(tmp_path, capsys):
    from functions.cli import main as cli

    folder = tmp_path / "data" / "broken"
    folder.mkdir()
    (folder / "state.json").write_text("{not json")  # looks saved with save_to_disk, is not
    config = tmp_path / "mine.json"
    config.write_text(json.dumps({"dataset": {"id": str(folder)}}))
    assert cli(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {config}: dataset {folder} cannot be read: ") and "Traceback" not in err


def test_a_file_the_loader_cannot_read_is_named(tmp_path):
    """An empty parquet file failed the preflight as `PreflightError: Parquet file size is 0 bytes`, naming no file:
    pyarrow's ArrowInvalid is a ValueError, and it passed for one of ours."""
    (tmp_path / "data" / "products.parquet").write_bytes(b"")
    spec = DatasetSpec(id=str(tmp_path / "data" / "products.parquet"))
    with pytest.raises(preflight.PreflightError, match=r"^dataset .*products.parquet cannot be read: ArrowInvalid"):
        preflight.check(tiny_model(), spec)
