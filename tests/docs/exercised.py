"""Every shell command the README and the docs show, and the test that exercises it.

A command is written as the page shows it (continuation lines joined, the comment dropped,
spaces single). ``test_commands.py`` fails when a page shows a command that is not here, when a
command here is no longer shown, or when a named test does not exist; it also composes and
checks the config of every experiment command and dry-runs every make command. Commands whose
test is ``TINY_RUN`` are run end to end by it on tiny data, as they are written plus the sizes.
Where the real command needs what CI lacks (a GPU, root, SLURM, a second host), the named test
is the one that exercises that path, and its marker says where it runs.
"""

TINY_RUN = "tests/docs/test_shown_runs.py::test_a_shown_experiment_runs_on_tiny_data"
DRY_RUN = "tests/docs/test_commands.py::test_shown_make_commands_resolve"
EXPERIMENT = "tests/pipelines/test_experiment.py"
CLI = "tests/pipelines/test_cli.py"
MULTIHOST = "tests/multihost/test_multihost.py"  # marker multihost: make test-multihost, as root
OUT_OF_CORE = "tests/pipelines/test_out_of_core.py"
# workers with their own local directories (across hosts: test_multihost.py's shards test, as root)
DISK_WORKERS = "tests/tasks/distributed_glm/test_disk_replicas.py::test_parts_on_the_workers_disks_equal_the_same_parts_in_process"
COCOA_DISK = "tests/pipelines/test_cocoa_disk.py::test_the_preset_runs_and_every_part_reads_its_shard"

EXERCISED = {
    # README
    "make experiment": f"{EXPERIMENT}::test_experiment_tracks_parent_arms_metrics_and_artifacts",
    "make test": "tests/docs/test_commands.py::test_make_test_runs_pytest_without_the_excluded_markers",
    "make docs": "tests/docs/test_build.py::test_make_docs_builds_the_site_strict_and_offline",
    # user guide: experiments
    'make experiment ARGS="experiment=duhl_svm"': "tests/pipelines/test_config_compose.py::test_duhl_svm_preset",
    'make experiment ARGS="device.memory_budget=0.1 data.n_samples=20000 model.alpha=0.1"': TINY_RUN,
    'make experiment ARGS="experiment=single solver=duhl_random"': TINY_RUN,
    'make experiment ARGS="experiment=cocoa"': f"{EXPERIMENT}::test_cocoa_end_to_end",
    'make experiment ARGS="experiment=cocoa_svm"':
        "tests/pipelines/test_reproduce.py::test_every_claim_is_measured_and_linked_to_its_run",
    'make experiment ARGS="experiment=cocoa_l1"': f"{EXPERIMENT}::test_cocoa_l1_end_to_end",
    'make experiment ARGS="experiment=diana"': f"{EXPERIMENT}::test_diana_end_to_end",
    'make experiment ARGS="experiment=distbelief"':
        "tests/pipelines/test_distbelief_experiment.py::test_tiny_run_tracks_parent_and_arm_runs_with_curves",
    'make experiment ARGS="experiment=distbelief_model_parallel"':
        "tests/pipelines/test_distbelief_model_parallel.py::test_tiny_run_logs_step_time_curves_and_the_ratio_to_one_partition",
    # user guide: DistBelief's model parallelism (its other commands are the lines above and below)
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --arms all --repeats 5":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --arms large_k1,large_k2,large_k4,small_k1,small_k2,"
    "small_k4 --repeats 3": "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
                            "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --arms large_k1,large_k2 --repeats 5":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --in-process --arms large_k1,large_k2,large_k4,"
    "small_k1,small_k2,small_k4": "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
                                  "test_in_process_times_every_partitions_work_without_a_cluster",
    '.venv/bin/python -m benchmarks.peers --quick --no-docs --no-tracking --only "logistic l1" '
    '--only "squared hinge l1" --only "w8a[20000] logistic"':
        "tests/benchmarks/test_peers_bench.py::test_only_runs_the_problems_it_names",
    '.venv/bin/python -m benchmarks.peers --quick --no-docs --no-tracking --only "w8a[20000] logistic l1" '
    '--only "w8a[20000] squared hinge l1" --only "dense logistic l1 5000x500"':
        "tests/benchmarks/test_peers_bench.py::test_only_runs_the_problems_it_names",
    ".venv/bin/python -m pipelines.experiment experiment=out_of_core data=synthetic_dense data.n_samples=40000 "
    "data.n_features=2000 model=logistic model.penalty=l1 model.C=0.05 model.fit_intercept=false "
    "experiment.baselines=[sequential] ~experiment.arms.random ~experiment.arms.peer_daskml "
    "~experiment.arms.peer_sklearn experiment.max_time=300 experiment.arms.sequential.max_time=400": TINY_RUN,
    ".venv/bin/python -m benchmarks.classifier_sides --repeats 3":
        "tests/benchmarks/test_classifier_sides_bench.py::test_every_side_and_budget_reaches_the_target",
    ".venv/bin/python -m benchmarks.classifier_sides --dense 40000x200 --noisy 40000x200 --uniform 20000x200 "
    "--clicks 200000 --losses logistic --budgets 0.25 --C 0.03,0.1,0.3,1,3,10 --repeats 1":
        "tests/benchmarks/test_classifier_sides_bench.py::test_the_coupling_sweep_runs_each_set_at_each_C",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --arms large_k1,large_k2 --repeats 3":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --repeats 3":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_the_bench_runs_the_arms_and_reports_steps_against_one_partition",
    ".venv/bin/python -m benchmarks.distbelief_model_parallel --ping-pong --repeats 3":
        "tests/benchmarks/test_distbelief_model_parallel_bench.py::"
        "test_ping_pong_times_a_round_trip_over_a_link_and_as_an_actor_call",
    'make experiment ARGS="tracking=none progress=false"': TINY_RUN,
    'make experiment ARGS="+experiment.arms.importance.selection=importance"': TINY_RUN,
    'make experiment ARGS="+experiment.arms.sk={name:peer_sklearn}"': TINY_RUN,
    'make experiment ARGS="experiment=single model=logistic model.penalty=l1 model.C=0.05 '
    '+experiment.arms.liblinear={name:peer_sklearn}"': TINY_RUN,
    "make reproduce": "tests/pipelines/test_reproduce.py::test_every_claim_is_measured_and_linked_to_its_run",
    'make reproduce ARGS="experiment.reproduce.only=[diana]"':
        "tests/pipelines/test_reproduce.py::test_only_runs_some_and_unknown_names_fail_before_any_run",
    # user guide: your own data
    'make experiment ARGS="experiment=out_of_core data=npy data.path=my-data/X.npy data.target=my-data/y.npy"':
        f"{OUT_OF_CORE}::test_the_preset_on_a_users_own_npy_trains_from_its_converted_copy",
    'make experiment ARGS="experiment=out_of_core data=npy data.path=my-data/Xy.npy data.target_column=-1"':
        "tests/tasks/test_data_npy.py::test_the_cached_matrix_is_the_users_in_fortran_order",
    'make experiment ARGS="experiment=single data=npy data.path=my-data/X.npy data.target=my-data/y.npy '
    'device.memory_budget=null device.host_budget=256MB"':
        "tests/tasks/test_data_npy.py::test_duhl_with_a_host_budget_on_the_users_file_reaches_scikit_learns_lasso",
    'make experiment ARGS="experiment=out_of_core data=npy data.path=my-data/X.npy data.target=my-data/y.npy '
    "'~experiment.arms.peer_daskml' '~experiment.arms.peer_sklearn' 'experiment.baselines=[sequential,random]'\"":
        f"{OUT_OF_CORE}::test_the_preset_on_a_users_own_npy_trains_from_its_converted_copy",
    'make experiment ARGS="experiment=out_of_core data=zarr data.path=my-data/Xy.zarr/X data.target=my-data/Xy.zarr/y"':
        "tests/tasks/test_data_zarr.py::test_duhl_with_a_host_budget_on_the_store_reaches_scikit_learns_lasso",
    'make experiment ARGS="experiment=duhl_svm data.path=my-data/a9a"':
        "tests/tasks/test_data.py::test_libsvm_file_is_read_with_its_values",
    'make experiment ARGS="data=sklearn data.dataset=diabetes model.alpha=0.1 device.memory_budget=0.5"': TINY_RUN,
    # user guide: devices
    "make install-gpu": DRY_RUN,
    'make experiment ARGS="device=cuda"': f"{CLI}::test_cuda_without_gpu_exits_2_with_one_line",
    'make experiment ARGS="device=cuda cluster=local_cuda"': f"{CLI}::test_cuda_without_gpu_exits_2_with_one_line",
    'make experiment ARGS="device=cuda_sim data.n_samples=40 data.n_features=20 data.n_informative=4 '
    'experiment.target_rel_gap=1e-3"': "tests/solvers/duhl/test_cuda_sim_oracle.py::test_duhl_on_cuda_sim_reaches_the_oracle_optimum",
    "make test-gpu": "tests/solvers/duhl/test_gpu.py::test_cuda_reaches_the_oracle_objective",  # marker gpu
    "make bench-gpu QUICK=1": "tests/benchmarks/test_bench_gpu.py::test_bench_gpu_runs_end_to_end_on_the_simulator",
    # user guide: data larger than RAM
    "make out-of-core": f"{OUT_OF_CORE}::test_arms_read_from_disk_count_every_byte_and_reach_scikit_learns_objective",
    'make out-of-core ARGS="device.host_budget=0.1"':
        f"{OUT_OF_CORE}::test_arms_read_from_disk_count_every_byte_and_reach_scikit_learns_objective",
    "make out-of-core-big": f"{OUT_OF_CORE}::test_arms_read_from_disk_count_every_byte_and_reach_scikit_learns_objective",
    'make experiment ARGS="experiment=out_of_core_svm"':  # marker slow
        "tests/pipelines/test_out_of_core_svm.py::test_dual_arms_read_samples_from_disk_count_every_byte_and_reach_liblinears_objective",
    'make experiment ARGS="experiment=out_of_core_svm model=logistic model.C=0.001"':
        "tests/pipelines/test_out_of_core_svm.py::test_dual_arms_read_samples_from_disk_count_every_byte_and_reach_liblinears_objective",
    'make experiment ARGS="experiment=out_of_core data.n_samples=4000 data.n_features=1000"':
        f"{OUT_OF_CORE}::test_arms_read_from_disk_count_every_byte_and_reach_scikit_learns_objective",
    'make experiment ARGS="experiment=out_of_core_sparse"':  # its tiny version, below
        "tests/pipelines/test_out_of_core_sparse.py::test_arms_train_from_the_sparse_store_count_every_byte_and_reach_liblinears_objective",
    'make experiment ARGS="experiment=out_of_core_sparse data=synthetic_criteo data.n_samples=2000 data.hash_bits=10 '
    'device.host_budget=0.25"':
        "tests/pipelines/test_out_of_core_sparse.py::test_arms_train_from_the_sparse_store_count_every_byte_and_reach_liblinears_objective",
    "make out-of-core-sparse-big":  # its tiny version
        "tests/pipelines/test_out_of_core_sparse.py::test_arms_train_from_the_sparse_store_count_every_byte_and_reach_liblinears_objective",
    'make experiment ARGS="experiment=cocoa_disk"':
        "tests/pipelines/test_cocoa_disk.py::test_the_preset_plans_its_arms_on_the_workers_disks",
    'make experiment ARGS="experiment=cocoa_disk data.n_samples=8000 data.n_features=256 device.host_budget=1MB"':
        COCOA_DISK,
    'make out-of-core ARGS="device=cuda device.memory_budget=0.1"':
        "tests/solvers/storage/test_ram_tier.py::test_gpu_under_a_ram_tier_reaches_scikit_learns_optimum",
    "make bench-gpu-disk": DRY_RUN,
    # user guide: clusters
    ".venv/bin/dask scheduler --host 10.0.0.1 --port 8786 --dashboard-address 10.0.0.1:8787":
        f"{MULTIHOST}::test_presets_on_hosts_without_the_driver_files_take_the_in_process_steps",
    ".venv/bin/dask worker tcp://10.0.0.1:8786 --host 10.0.0.2 --nworkers 1 --nthreads 1 "
    "--dashboard-address 10.0.0.2:0 --local-directory dask-scratch":
        f"{MULTIHOST}::test_presets_on_hosts_without_the_driver_files_take_the_in_process_steps",
    ".venv/bin/python -m pipelines.experiment experiment=cocoa cluster=remote cluster.address=tcp://10.0.0.1:8786":
        f"{MULTIHOST}::test_presets_on_hosts_without_the_driver_files_take_the_in_process_steps",
    ".venv/bin/dask scheduler --host 10.0.0.1 --port 8786 --dashboard-address 10.0.0.1:8787 --protocol tls "
    "--tls-ca-file ca.pem --tls-cert scheduler.pem --tls-key scheduler-key.pem":
        f"{MULTIHOST}::test_tls_cluster_runs_the_experiment_and_refuses_plain_tcp",
    ".venv/bin/dask worker tls://10.0.0.1:8786 --host 10.0.0.2 --nworkers 1 --nthreads 1 "
    "--dashboard-address 10.0.0.2:0 --local-directory dask-scratch --protocol tls --tls-ca-file ca.pem "
    "--tls-cert worker.pem --tls-key worker-key.pem": f"{MULTIHOST}::test_tls_cluster_runs_the_experiment_and_refuses_plain_tcp",
    ".venv/bin/python -m pipelines.experiment experiment=cocoa cluster=remote cluster.address=tls://10.0.0.1:8786 "
    "cluster.tls_ca_file=ca.pem cluster.tls_client_cert=client.pem cluster.tls_client_key=client-key.pem":
        f"{MULTIHOST}::test_tls_cluster_runs_the_experiment_and_refuses_plain_tcp",
    ".venv/bin/python -m pipelines.experiment experiment=cocoa cluster=slurm cluster.queue=compute "
    "cluster.account=myproj cluster.python=python cluster.local_directory='$TMPDIR' "
    "'cluster.job_script_prologue=[\"source ~/duhl-lab/.venv/bin/activate\"]'":
        "tests/tasks/test_cluster.py::test_slurm_job_script_renders_without_slurm",
    'make experiment ARGS="experiment=cocoa cluster.dashboard_address=:8787"':
        "tests/tasks/test_cluster.py::test_a_dashboard_port_alone_binds_the_configured_host",
    ".venv/bin/dask worker tcp://10.0.0.1:8786 --host 10.0.0.2 --nworkers 1 --nthreads 1 "
    "--dashboard-address 10.0.0.2:0 --local-directory /local/scratch": DISK_WORKERS,
    ".venv/bin/python -m pipelines.experiment experiment=cocoa_disk cluster=remote "
    "cluster.address=tcp://10.0.0.1:8786 cluster.data_access=disk": DISK_WORKERS,
    '.venv/bin/python -m pipelines.experiment experiment=cocoa_disk tracking.uri=sqlite:///rss.db progress=false '
    '"~experiment.arms.k1" "~experiment.arms.k2" "~experiment.arms.duhl" "~experiment.arms.peer_spark" '
    '"experiment.baselines=[]" "+experiment.arms.k4b={name:cocoa,n_parts:4,local_epochs:1}" '
    '"+experiment.arms.k4c={name:cocoa,n_parts:4,local_epochs:1}"': COCOA_DISK,
    "make test-multihost": f"{MULTIHOST}::test_a_worker_killed_mid_run_the_run_completes_its_shards_shipped_again",
    # user guide: the MLflow UI, sweeps
    "make ui": "tests/pipelines/test_ui.py::test_make_ui_serves_the_runs",
    "make sweep": f"{CLI}::test_multirun_2x2_nests_four_jobs_under_one_sweep_run",
    ".venv/bin/python -m pipelines.experiment -m solver.local_epochs=1,2,4 data.correlation=0.2,0.8":
        f"{CLI}::test_multirun_2x2_nests_four_jobs_under_one_sweep_run",
    ".venv/bin/python -m pipelines.experiment -m hydra/launcher=joblib hydra.launcher.n_jobs=2 model=lasso,ridge":
        "tests/pipelines/test_config_compose.py::test_joblib_launcher_is_available_for_parallel_sweeps",
    # benchmarks
    "make bench QUICK=1": "tests/benchmarks/test_peers_bench.py::test_quick_suite_lists_every_required_problem",
    "make bench": "tests/benchmarks/test_peers_bench.py::test_rows_summary_table_and_plot",
}
