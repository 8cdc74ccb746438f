"""Fixtures the hook tests share: a fake `vipu` at the subprocess boundary and a config file
with a state directory of the test's own."""

from __future__ import annotations

import json

import pytest

from slurm_ipu import config

from .fake_vipu import FakeVipu


@pytest.fixture
def fake(mocker):
    vipu = FakeVipu()
    mocker.patch("slurm_ipu.vipu.client.subprocess.run", side_effect=vipu)
    mocker.patch("slurm_ipu.vipu.client.time.sleep")
    return vipu


def write_conf(tmp_path, **extra):
    path = tmp_path / "c.yaml"
    body = {"version": 1, "state_dir": str(tmp_path / "state"), "vipu": {"retries": 1}, "prolog": {"deadline": 5}}
    body.update(extra)
    path.write_text(json.dumps(body))
    return path


@pytest.fixture
def cfg(tmp_path):
    return config.load(str(write_conf(tmp_path)), environ={})
