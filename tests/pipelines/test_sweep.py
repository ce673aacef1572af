"""pipelines.sweep without a multirun: which overrides sweep, and how a job is named."""

import json

from pipelines.sweep import job_label, short_names, sweep_values, swept
from pipelines.tracking import SWEEP_KEYS_ENV


def test_swept_overrides_are_the_ones_with_several_values():
    given = ["tracking.uri=sqlite:///x.db", "device.memory_budget=0.1,0.25", "model=lasso,svm",
             "data.seed=range(1,3)", "experiment=single", "+x=[1,2]"]
    assert swept(given) == ["device.memory_budget=0.1,0.25", "model=lasso,svm", "data.seed=range(1,3)"]


def test_a_job_is_named_by_its_swept_values_in_sweep_order(monkeypatch):
    monkeypatch.setenv(SWEEP_KEYS_ENV, json.dumps(["device.memory_budget", "model"]))
    job = ["tracking.uri=sqlite:///x.db", "model=svm", "data.n_samples=100", "device.memory_budget=0.1"]
    assert sweep_values(job) == {"device.memory_budget": "0.1", "model": "svm"}
    assert job_label(job, "duhl_lasso #3") == "memory_budget=0.1 model=svm"
    monkeypatch.delenv(SWEEP_KEYS_ENV)
    assert job_label(job, "duhl_lasso #3") == "duhl_lasso #3"  # nothing known to sweep


def test_short_names_keep_keys_that_would_read_the_same():
    assert short_names(["model.alpha", "data.alpha", "device.memory_budget"]) == {
        "model.alpha": "model.alpha", "data.alpha": "data.alpha", "device.memory_budget": "memory_budget"}
