"""The DLIO export's data folder for a run that read S3: always a folder DLIO can list."""

from __future__ import annotations

import pytest

from ioprobe.analysis.dlio import dlio_workload
from tests.unit.analysis.test_whatif import probe_record


def _folder(target: str, files: int) -> object:
    rec = probe_record()
    rec.dataset.target, rec.dataset.files, rec.dataset.remote = target, files, True
    fields = dlio_workload(rec).fields
    return next(f.value for f in fields if (f.section, f.key) == ("dataset", "data_folder"))


@pytest.mark.parametrize(
    ("target", "files", "folder"),
    [
        ("s3://b/datasets/job1", 40, "s3://b/datasets/job1/"),
        ("s3://b/datasets/job1/", 1, "s3://b/datasets/job1/"),
        # a glob: the folder every match lies below, not the pattern with '/' added
        ("s3://b/glob/**/x*.bin", 40, "s3://b/glob/"),
        ("s3://b/glob/a[12]/x.bin", 2, "s3://b/glob/"),
        # one object: the folder holding it, not the object used as a folder
        ("s3://b/one/only.bin", 1, "s3://b/one/"),
        ("s3://b/only.bin?versionId=3", 1, "s3://b/"),
    ],
)
def test_the_data_folder_of_an_s3_run_is_a_folder(target: str, files: int, folder: str) -> None:
    assert _folder(target, files) == folder


@pytest.mark.parametrize(
    "target",
    ["s3://bkt/${oc.env:AWS_SECRET_ACCESS_KEY}/x/", "s3://b${x}/data/"],
)
def test_a_hydra_interpolation_taken_from_the_record_is_refused(target: str) -> None:
    # it was written as a live ${...} that DLIO's Hydra resolves (an environment variable,
    # any resolver); the same text given as --data-folder was already refused
    with pytest.raises(ValueError, match=r"holds '\$\{', which DLIO's Hydra would resolve"):
        _folder(target, 40)
    rec = probe_record()
    rec.dataset.target, rec.dataset.remote = target, True
    fields = dlio_workload(rec, data_folder="data/train/").fields  # the way out it names
    assert not any("${" in str(f.value) for f in fields)


def test_the_model_is_named_from_the_folder_as_its_server_names_it() -> None:
    # from the encoded segment it was "ioprobe_sp_20ace_20_24_7b..."
    rec = probe_record()
    rec.dataset.target = "FILE:///data/sp%20ace%20set/?x=1"
    fields = dlio_workload(rec).fields
    name = next(f.value for f in fields if (f.section, f.key) == ("model", "name"))
    assert name == "ioprobe_sp_ace_set"
