"""SLURM variables to TF_CONFIG, without a cluster (the cluster tests run it for real)."""

from dlscale.training import expand_slurm_hostlist, expand_tasks_per_node, slurm_tf_config


def test_hostlists_and_tasks_per_node():
    assert expand_slurm_hostlist("gpu[01-02,05],login1") == ["gpu01", "gpu02", "gpu05", "login1"]
    assert expand_slurm_hostlist("n1") == ["n1"]
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_every_task_gets_its_own_port_even_on_a_shared_host():
    env = {"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
           "SLURM_PROCID": "3", "SLURM_JOB_ID": "17"}
    config = slurm_tf_config(env)
    assert config["task"] == {"type": "worker", "index": 3}
    assert config["cluster"]["worker"] == ["n1:12850", "n1:12851", "n2:12852", "n2:12853"]
