"""pipelines.report: numbers to the target, speedups, table, plots, from hand-made traces."""

import math

import matplotlib.colors
import pandas as pd
import pytest
from rich.console import Console

from pipelines.report import (advantage, arm_stats, markdown, save_plots, significant, speedup, speedup_metrics,
                              speedup_texts, table, verdict)
from pipelines.ui import arm_colours


def trace(times, gaps, epoch_step=1.0, bytes_step=100):
    n = len(times)
    return pd.DataFrame({"round": range(n), "time_s": times, "epoch": [epoch_step * (i + 1) for i in range(n)],
                         "rel_gap": gaps, "bytes_h2d": [bytes_step * (i + 1) for i in range(n)]})


FAST = trace([1, 2, 3], [1e-2, 1e-5, 1e-7])  # reaches 1e-6 at t=3
SLOW = trace([2, 6, 12], [1e-2, 1e-4, 1e-6])  # reaches 1e-6 at t=12 (equal counts)
NEVER = trace([5, 10, 20], [1e-1, 1e-2, 1e-3])  # stops at t=20, not reached


def test_arm_stats_take_the_first_row_at_or_below_the_target():
    s = arm_stats(SLOW, 1e-6, "converged")
    assert s.reached and s.time_to_target_s == 12 and s.epochs_to_target == 3 and s.bytes_to_target == 300
    assert arm_stats(FAST, 1e-4).time_to_target_s == 2
    never = arm_stats(NEVER, 1e-6)
    assert not never.reached and math.isnan(never.time_to_target_s) and never.final == 1e-3
    assert "time_to_target_s" not in never.run_metrics() and never.run_metrics()["reached_target"] == 0


def test_speedup_is_a_ratio_of_times_to_target_or_a_lower_bound():
    fast, slow, never = (arm_stats(t, 1e-6) for t in (FAST, SLOW, NEVER))
    assert speedup(fast, slow).value == pytest.approx(4.0) and not speedup(fast, slow).lower_bound
    bound = speedup(fast, never)
    assert bound.value == pytest.approx(20 / 3) and bound.lower_bound and str(bound) == ">6.7x"
    assert speedup(never, fast) is None


def test_only_certified_rows_reach_the_target():
    """Compressed CoCoA+: an estimated gap below the target is not a hit; the certified row is."""
    t = trace([1, 2, 3, 4], [1e-2, 1e-7, 1e-7, 1e-7])
    t["certified"] = [1.0, 0.0, 0.0, 1.0]
    s = arm_stats(t, 1e-6)
    assert s.reached and s.time_to_target_s == 4 and s.rounds_to_target == 3
    t["certified"] = [1.0, 0.0, 0.0, 0.0]
    assert not arm_stats(t, 1e-6).reached


def test_advantage_in_rounds_and_bits():
    fast, slow, never = FAST.copy(), SLOW.copy(), NEVER.copy()
    for t, bits in ((fast, 10), (slow, 40), (never, 5)):
        t["bits_sent"] = [bits * (i + 1) for i in range(len(t))]
    fast, slow, never = (arm_stats(t, 1e-6) for t in (fast, slow, never))
    assert advantage(fast, slow, "bits").value == pytest.approx(120 / 30)
    assert advantage(fast, slow, "rounds").value == pytest.approx(2 / 2)
    assert advantage(fast, slow, "epochs").value == pytest.approx(1.0)
    bound = advantage(fast, never, "bits")
    assert bound.lower_bound and bound.value == pytest.approx(15 / 30)
    assert advantage(never, fast, "bits") is None and advantage(fast, slow).value == speedup(fast, slow).value


def test_speedup_metrics_compare_the_main_arm_with_every_other():
    stats = {"duhl-gap": arm_stats(FAST, 1e-6), "sequential": arm_stats(SLOW, 1e-6), "random": arm_stats(NEVER, 1e-6)}
    assert speedup_metrics(stats, "duhl-gap") == pytest.approx({"speedup_vs_sequential": 4.0, "speedup_vs_random": 20 / 3})
    assert speedup_metrics(stats, "random") == {}


def test_table_and_verdict_show_the_numbers():
    stats = {"duhl-gap": arm_stats(FAST, 1e-6, "converged"), "sequential": arm_stats(SLOW, 1e-6, "converged"),
             "random": arm_stats(NEVER, 1e-6, "max_time")}
    console = Console(width=200, record=True)
    console.print(table(stats, ["sequential", "random"], 1e-6))
    text = console.export_text()
    assert "4.0x" in text and ">6.7x" in text and "> 20.00" in text and "max_time" in text
    line = verdict(stats, "duhl-gap", ["sequential", "random"], 1e-6)
    assert line == "duhl-gap reached rel_gap 1e-06 in 3.00s; speedup 4.0x vs sequential, >6.7x vs random."
    assert "did not reach" in verdict(stats, "random", ["duhl-gap"], 1e-6)


def test_markdown_table_has_the_terminal_tables_rounded_cells():
    stats = {"duhl-gap": arm_stats(FAST, 1e-6, "converged"), "sequential": arm_stats(SLOW, 1e-6, "converged"),
             "random": arm_stats(NEVER, 1e-6, "max_time")}
    lines = markdown(table(stats, ["sequential", "random"], 1e-6)).splitlines()
    assert lines[0].startswith("To rel_gap <= 1e-06") and lines[1] == ""
    assert lines[2] == ("| arm | status | time (s) | epochs | GB host->device | final rel_gap | speedup vs sequential "
                        "| speedup vs random |")
    assert lines[3] == "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    assert lines[4] == "| duhl-gap | converged | 3.00 | 3.0 | 0.000 | 1.00e-07 | 4.0x | >6.7x |"
    assert lines[6] == "| random | max_time | > 20.00 | > 3.0 | 0.000 | 1.00e-03 | - | - |"
    assert significant(9.914259103849265) == 9.91 and significant(0.0123456) == 0.0123
    assert speedup_texts(stats, "duhl-gap") == {"speedup_vs_sequential": "4.0x", "speedup_vs_random": ">6.7x"}


def test_arm_colours_follow_the_role_not_the_order():
    a = arm_colours(["resident", "random", "sequential", "duhl-gap"], "duhl-gap", ["sequential", "random"])
    b = arm_colours(["duhl-gap", "sequential", "random", "resident"], "duhl-gap", ["sequential", "random"])
    assert a == b and len(set(a.values())) == 4
    assert all(len(c) == 7 and c == c.lower() and c.startswith("#") for c in a.values())  # the UI's #rrggbb
    many = arm_colours([f"k{i}" for i in range(12)], "k0", [])
    assert len(set(many.values())) == 9  # the palette cycles after its nine colours


def test_plots_are_written_in_the_arms_colours(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    drawn = []
    plot = Axes.plot

    def record(self, *args, **kwargs):
        lines = plot(self, *args, **kwargs)
        drawn.extend((line.get_label(), matplotlib.colors.to_hex(line.get_color())) for line in lines)
        return lines

    monkeypatch.setattr(Axes, "plot", record)
    colours = {"duhl-gap": "#d62728", "sequential": "#1f77b4"}
    paths = save_plots({"duhl-gap": FAST, "sequential": SLOW}, 1e-6, tmp_path, colours=colours)
    assert [p.name for p in paths] == ["rel_gap_vs_time.png", "rel_gap_vs_bytes.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert drawn == list(colours.items()) * 2  # both plots, each arm in its run's colour
