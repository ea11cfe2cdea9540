#include "meshtrain/launch/slurm_env.h"

#include <gtest/gtest.h>

#include <map>

#include "meshtrain/core/error.h"

using namespace meshtrain;
using namespace meshtrain::launch;

using V = std::vector<std::string>;

TEST(Hostlist, Expands) {
  EXPECT_EQ(expand_hostlist("node1"), V{"node1"});
  EXPECT_EQ(expand_hostlist("gpu[01-04,07],login1"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"}));
  EXPECT_EQ(expand_hostlist("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[1-2]-ib"), (V{"r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"}));
  EXPECT_EQ(expand_hostlist("a,b[1,3],c"), (V{"a", "b1", "b3", "c"}));
  // The cases: ranges and singles in one bracket, several brackets in one name, zero padding kept
  // across a width change, several names.
  EXPECT_EQ(expand_hostlist("gpu[01-02,05-06,10]"), (V{"gpu01", "gpu02", "gpu05", "gpu06", "gpu10"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]-node[01-02],login1"),
            (V{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02", "login1"}));
  EXPECT_EQ(expand_hostlist("n[008-010]"), (V{"n008", "n009", "n010"}));
  EXPECT_EQ(expand_hostlist("a-[1-2].cluster,b"), (V{"a-1.cluster", "a-2.cluster", "b"}));
  EXPECT_THROW(expand_hostlist("gpu[01-"), UserError);
  EXPECT_THROW(expand_hostlist("gpu[]"), UserError);
  EXPECT_THROW(expand_hostlist("gpu[x-y]"), UserError);
  EXPECT_THROW(expand_hostlist("gpu[5-1]"), UserError);
}

TEST(SlurmEnv, FillsUnsetOptionsOnly) {
  std::map<std::string, std::string> m{{"SLURM_JOB_ID", "4242"},     {"SLURM_NODEID", "2"},
                                       {"SLURM_NNODES", "4"},        {"SLURM_JOB_NODELIST", "gpu[07-10]"},
                                       {"SLURM_GPUS_ON_NODE", "8"}};
  EnvLookup env = [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
  auto o = parse_launch_options({"--nproc-per-node", "2", "x.py"}, [](const std::string&) {
    return std::optional<std::string>();
  });
  std::string what = apply_slurm_env(o, env);
  EXPECT_NE(what.find("Slurm job 4242"), std::string::npos);
  EXPECT_EQ(o.nnodes, "4");
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "gpu07");
  EXPECT_EQ(o.run_id, "4242");
  EXPECT_EQ(o.nproc_per_node, "2");  // the flag wins over SLURM_GPUS_ON_NODE
  LaunchOptions none;
  EXPECT_EQ(apply_slurm_env(none, [](const std::string&) { return std::optional<std::string>(); }), "");
}
