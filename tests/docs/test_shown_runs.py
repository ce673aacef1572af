"""The shown experiment commands that no other test runs (``TINY_RUN`` in exercised.py), run
end to end as they are written, on tiny data and without MLflow: every arm reaches the target."""

import pytest

from doc_blocks import ROOT, compose, experiment_commands
from exercised import EXERCISED, TINY_RUN


@pytest.fixture(scope="module")
def hydra_conf():
    from hydra import initialize_config_dir

    from pipelines.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        yield


TINY = {"n_samples": 150, "n_features": 40, "n_informative": 5}


@pytest.mark.timeout(600)  # the first experiment on an empty Numba cache compiles its kernels
@pytest.mark.parametrize("command", sorted(c for c, test in EXERCISED.items() if test == TINY_RUN))
def test_a_shown_experiment_runs_on_tiny_data(command, hydra_conf, tmp_path, capsys):
    """The command as shown, on tiny data (its data group's sizes made small), without MLflow:
    every arm reaches the target."""
    from pipelines.experiment import run_experiment

    (job,) = experiment_commands()[command]
    data = compose(job).data
    sizes = [f"data.{k}={v}" for k, v in TINY.items() if k in data]
    overrides = [*job, *sizes, "experiment.target_rel_gap=1e-4", "experiment.max_time=20", "tracking=none",
                 "progress=false", f"cache_dir={tmp_path / 'cache'}"]
    result = run_experiment(compose(overrides), tmp_path / "out", "", overrides)
    assert result, f"{command!r} ran no arm"
    reached = {arm: stats.get("reached_target") for arm, stats in result.items()}
    assert all(reached.values()), f"{command!r}: arms that did not reach rel_gap 1e-4: {reached}"
    assert "reached rel_gap 0.0001" in capsys.readouterr().out
