"""benchmarks.classifier_sides: every (loss, side, budget) arm runs to the target on a small set."""

import math

from benchmarks import classifier_sides


def test_every_side_and_budget_reaches_the_target(capsys):
    classifier_sides.main(["--w8a-rows", "0", "--dense", "400x20", "--repeats", "1"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    seen = {(r[2] + " " + r[3] if r[2] == "squared" else r[2], r[-4], r[-3]) for r in rows}
    assert seen == {(loss, side, budget) for loss in ("logistic", "squared hinge")
                    for side in ("dual", "primal") for budget in ("all", "0.25")}
    assert all(math.isfinite(float(r[-2])) and math.isfinite(float(r[-1])) for r in rows), rows
