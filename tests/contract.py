"""The RunRecord keys DESIGN.md promises are always present."""

CONTRACT_KEYS = frozenset(
    {
        "schema",
        "kind",
        "host",
        "dataset",
        "stages",
        "bottleneck",
        "predicted_samples_per_s",
        "measured_samples_per_s",
        "gpu_idle_fraction",
        "recommendations",
    }
)
