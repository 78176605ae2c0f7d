#!/usr/bin/env bash
# Hardware sizing from numbers alone with `ioprobe size`: for each storage class and 1-64 GPUs
# per node, the predicted GPU utilisation, what binds, and how many GPUs each class keeps at
# >= 90%. No dataset, no GPU and no saved run are needed; each run takes well under a second.
# docs/sizing.md shows and explains the output.
#
# The per-sample figures below are illustrative, not measurements: replace them with your own,
# or size from a measured run (`ioprobe probe --json run.json ...; ioprobe size run.json`).
set -euo pipefail
cd "$(dirname "$0")/.."

IOPROBE=${IOPROBE:-ioprobe}
if ! command -v "$IOPROBE" >/dev/null 2>&1 && [[ -x .venv/bin/ioprobe ]]; then
    IOPROBE=.venv/bin/ioprobe
fi
export COLUMNS=140   # wide enough for the 1-64 GPU table on one line per class

GPUS=1,2,4,8,16,32,64

# a. Image dataset: ImageNet-like JPEGs, 110 kB each, 140 GB in all. 2500 samples/s per GPU is
#    an illustrative rate for a ResNet-50-class model on a current GPU with mixed precision;
#    4 ms of CPU per sample (JPEG decode + augmentation); 64 cores per node. One node, every
#    storage class in the catalog: which storage and how many cores keep 1-64 GPUs busy?
echo "### a. image dataset, one node: 110 kB/sample, 2500 samples/s per GPU, 4 ms CPU, 64 cores"
"$IOPROBE" size --sample-bytes 110kB --gpu-samples-per-s 2500 \
    --cpu-ms-per-sample 4 --cores 64 --dataset-bytes 140GB --gpus "$GPUS"
echo

# b. High-density dataset: 3D medical volumes (or video clips), 8 MB each, 2 TB in all; about
#    60 samples/s per GPU (a 3D U-Net-class model, illustrative), 40 ms of CPU per sample,
#    64 cores per node. Same question: here bandwidth, not IOPS, limits the storage.
echo "### b. 3D volumes, one node: 8 MB/sample, 60 samples/s per GPU, 40 ms CPU, 64 cores"
"$IOPROBE" size --sample-bytes 8MB --gpu-samples-per-s 60 \
    --cpu-ms-per-sample 40 --cores 64 --dataset-bytes 2TB --gpus "$GPUS"
echo

# c. Multi-node: the image dataset of (a) on 4 nodes, each with a 100 GbE NIC (12.5 GB/s), over
#    the network classes only. A filer is one device shared by all 4 nodes; object storage
#    scales with the connections each node opens. How many GPUs per node does each keep busy?
echo "### c. image dataset, 4 nodes with 100 GbE each, network storage only"
"$IOPROBE" size --sample-bytes 110kB --gpu-samples-per-s 2500 \
    --cpu-ms-per-sample 4 --cores 64 --dataset-bytes 140GB --gpus "$GPUS" \
    --nodes 4 --nic 12.5GB/s --storage nfs-10gbe,nfs-25gbe,nfs-100gbe,object-storage
