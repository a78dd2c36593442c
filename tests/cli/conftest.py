"""The tiny model with calibration data, so it can be quantized."""

import numpy as np
import pytest

CALIBRATION = "\ncalibration: {files: calib, samples: 12}\nquantize: {check_samples: 4}\n"


@pytest.fixture
def quantizable(tiny):
    """(config, store) of the tiny model, its folder holding 12 calibration samples (seeded)."""
    cfg, store = tiny
    rng = np.random.default_rng(3)
    (cfg.parent / "calib").mkdir()
    for i in range(12):
        np.save(cfg.parent / "calib" / f"s{i:02d}.npy", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    cfg.write_text(cfg.read_text() + CALIBRATION)
    return cfg, store
