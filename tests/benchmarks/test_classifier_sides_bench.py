"""benchmarks.classifier_sides: every (loss, side, budget) arm runs to the target on a small set,
and each set's coupling is printed beside it."""

import math

import pytest

from benchmarks import classifier_sides


def _rows(out):
    return [line.split() for line in out.splitlines()[1:]]


def test_every_side_and_budget_reaches_the_target(capsys):
    classifier_sides.main(["--w8a-rows", "0", "--dense", "400x20", "--repeats", "1"])
    rows = _rows(capsys.readouterr().out)
    seen = {(r[3] + " " + r[4] if r[3] == "squared" else r[3], r[-4], r[-3]) for r in rows}
    assert seen == {(loss, side, budget) for loss in ("logistic", "squared hinge")
                    for side in ("dual", "primal") for budget in ("all", "0.25")}
    assert all(math.isfinite(float(r[-2])) and math.isfinite(float(r[-1])) for r in rows), rows


def test_the_coupling_sweep_runs_each_set_at_each_C(capsys):
    """The sets of the design decision's sweep, small: centred (noisy) features couple far under
    2, uncentred (uniform) and binary (clicks: about 38 non-zeros a row) ones far over it."""
    classifier_sides.main(["--w8a-rows", "0", "--dense", "", "--noisy", "300x10", "--uniform", "300x10",
                           "--clicks", "300", "--losses", "logistic", "--budgets", "0.25", "--C", "0.1,1",
                           "--repeats", "1"])
    rows = _rows(capsys.readouterr().out)
    coupling = {r[0]: float(r[2]) for r in rows}
    assert coupling["noisy"] < 1.0 and coupling["uniform"] > 5.0 and 30.0 < coupling["clicks"] < 40.0
    assert sorted((r[0], r[4], r[5]) for r in rows) == sorted(
        (s, c, side) for s in ("noisy", "uniform", "clicks") for c in ("0.1", "1") for side in ("dual", "primal"))
    assert all(math.isfinite(float(r[-2])) for r in rows), rows


def test_an_unknown_loss_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        classifier_sides.main(["--losses", "hinge"])
    assert "--losses: 'hinge' is not one of logistic, squared hinge" in capsys.readouterr().err
