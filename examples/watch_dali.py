"""Watch a DALI pipeline in one line: per-operator timing and the verdict.

Run it as is (a CPU pipeline, no GPU needed):

    python examples/watch_dali.py [IMAGE_FOLDER]

IMAGE_FOLDER holds one sub-folder per class, as fn.readers.file expects; without it the example
uses ioprobe's built-in sample of JPEGs. Call ioprobe.time_dali_operators() before building
any pipeline: DALI reports its operators through NVTX, and reads where to send them at its
first call (``ioprobe run -- python train.py`` does this for you).
"""

from __future__ import annotations

import sys
import time

from nvidia.dali import fn, pipeline_def
from nvidia.dali.plugin.base_iterator import LastBatchPolicy
from nvidia.dali.plugin.pytorch import DALIGenericIterator

import ioprobe
from ioprobe.analysis.report import findings
from ioprobe.render.terminal import render

ioprobe.time_dali_operators()  # before any pipeline is built: see the docstring


@pipeline_def(batch_size=32, num_threads=2, device_id=None)  # on a GPU: device_id=0
def train_pipeline(root: str):  # type: ignore[no-untyped-def]
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    # on a GPU, decode there instead: fn.decoders.image(jpegs, device="mixed")
    images = fn.decoders.image(jpegs, device="cpu")
    images = fn.resize(images, resize_x=224, resize_y=224)
    return images, labels


def main() -> None:
    if len(sys.argv) > 1:
        root = sys.argv[1]
    else:
        from ioprobe.collect.sample_data import ensure_sample

        root = str(ensure_sample())
    loader = ioprobe.watch(
        DALIGenericIterator(
            train_pipeline(root),
            ["images", "labels"],
            reader_name="Reader",
            auto_reset=True,
            last_batch_policy=LastBatchPolicy.PARTIAL,
        )
    )
    for epoch in range(2):
        for batch in loader:
            images = batch[0]["images"]
            time.sleep(0.005)  # stands in for the training step on `images`
            del images
        print(f"epoch {epoch}: done")
    loader.run.save("dali_run.json")

    print(render(loader.run, findings(loader.run)), end="")
    print("record: dali_run.json (ioprobe report dali_run.json --html dali.html)")


if __name__ == "__main__":
    main()
