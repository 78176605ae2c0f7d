"""The RunRecord keys that are always present (docs/probe.md, "The record": the public JSON
contract every command writes and a test of each command checks)."""

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
