// The `meshtrain` commands, one file each (apps/meshtrain/<name>_command.cpp). Each takes argv from its own
// name on (argv[0] is the command) and returns the process exit code; a user's mistake is thrown as a
// UserError (exit 2), which main.cpp prints as one line.
#pragma once

namespace meshtrain::cli {

int cmd_train(int argc, char** argv);
int cmd_config(int argc, char** argv);
int cmd_prepare(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench_train(int argc, char** argv);
int cmd_bench_comm(int argc, char** argv);
int cmd_bench_ckpt(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_topo(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_doctor(int argc, char** argv);

}  // namespace meshtrain::cli
