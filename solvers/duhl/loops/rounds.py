"""A round's shape, the same in every loop: epochs on the block, passes worth of them, where the
stale gaps' refresh goes, how much of it there is, and what proves gaps without data."""


# A round does about ``local_epochs`` epochs' worth of updates however far shrinking has gone:
# passes over the visited coordinates, at most this many.
MAX_PASSES_PER_ROUND = 16
# local_epochs "auto" with part of the data resident in RAM: a block solved further takes fewer
# rounds (docs/explanation/design-decisions/in-memory.md); on disk one, since a round's reads dominate
AUTO_EPOCHS = 2
# the entries whose "auto" is one epoch a round in RAM too: the logistic dual's gap-chosen blocks of coupled
# rows, solved further, overshoot the rows outside and the gap swings from block to block
ONE_EPOCH_MODELS = frozenset({"logistic"})


def round_epochs(local_epochs, on_disk=False, model=None):
    """``local_epochs`` as a number of epochs on the block per round ("auto": AUTO_EPOCHS in RAM, 1
    with the data on disk or for a registry entry ``model`` of ONE_EPOCH_MODELS)."""
    if local_epochs == "auto":
        return 1 if on_disk or model in ONE_EPOCH_MODELS else AUTO_EPOCHS
    return int(local_epochs)


def passes_per_round(local_epochs, n_resident, n_visit):
    """Passes over the visited coordinates worth ``local_epochs`` epochs of the resident set."""
    return local_epochs * min(MAX_PASSES_PER_ROUND, max(1, n_resident // max(1, n_visit)))


def refresh_first(device, problem):
    """Whether a round refreshes the stale gaps before its selection, which then sees them, rather than
    beside the round's epochs (the selection seeing gaps a round old): on the CPU with the data in RAM,
    where nothing runs beside the host, for the Lasso family (a block re-chosen from gaps a round old
    is often the one just solved); not for the classifiers in the dual, whose rounds took more epochs
    so (docs/explanation/design-decisions/round-loop.md)."""
    return device == "cpu" and not problem.on_disk and not problem.dual_form


def refresh_ratio(refresh, problem):
    """Bytes the host refreshes per byte the device touches. "auto": as long as the device computes:
    1 in RAM; on disk, the disk's rate over the gap kernel's, measured on the first pass (the
    solver records it, so that passing it back reproduces the run)."""
    if refresh != "auto":
        return 0.0 if refresh == "all" else float(refresh)
    A = problem.A
    if not problem.on_disk or A.read_s <= 0 or A.compute_s <= 0:
        return 1.0
    return (A.matrix.useful_bytes / A.read_s) / (A.compute_bytes / A.compute_s)


def provable(problem):
    """The gap memory's arguments for proving gaps 0 without data (models with a ``zero_gap``)."""
    if problem.model.zero_gap is None:
        return {}
    return {"theta": problem.theta, "sqnorm": problem.sqnorm, "mu": problem.mu}
