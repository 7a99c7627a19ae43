// The sanitizer runtimes' defaults in a build configured with -Db_sanitize
// (the root meson.build compiles this file into every program only then;
// ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS and TSAN_OPTIONS still override them).
// Every report stops the program with status 66, which no other path of inferd,
// inferctl or the tests uses, so a report never passes for an expected failure
// (inferd's own 1 and 2). Reports go to stderr, whole and with stacks; no core
// dump and no SIGABRT, so the status is what a test sees.
extern "C" {

const char* __asan_default_options() {
  return "exitcode=66:halt_on_error=1:abort_on_error=0:detect_leaks=1:print_summary=1:disable_coredump=1";
}

const char* __ubsan_default_options() { return "exitcode=66:halt_on_error=1:print_stacktrace=1:print_summary=1"; }

const char* __lsan_default_options() { return "exitcode=66"; }

const char* __tsan_default_options() {
  return "exitcode=66:halt_on_error=1:abort_on_error=0:second_deadlock_stack=1:print_summary=1";
}

}  // extern "C"
