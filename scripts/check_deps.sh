#!/usr/bin/env bash
# The deps.graph test: holds src/ to the module graph CMake declares, and docs/architecture.md to CMake.
#   scripts/check_deps.sh build/dev/kvcodec_deps.txt
# kvcodec_deps.txt is written at configure time by kvcodec_module (cmake/kvcodec.cmake): each
# module's folder, the folders of its direct kvc_ dependencies and its transitive closure, and
# each test, fuzzer and benchmark source with the closure of what it links. Checked:
#   - every `#include "<folder>/..."` naming a module folder, in src/<folder>/, is of a folder
#     the file may use: its module's closure, or for a test/fuzzer/benchmark source, what it links;
#   - third-party headers only in their one folder: llama.cpp (llama.h, ggml*.h) in src/llama/,
#     cpp-httplib in src/serve/ (the server and its client), zstd in src/bench/, libav* in
#     src/libav/, pybind11 in src/python/;
#   - docs/architecture.md's "Source layout and dependency graph" table: one row per module folder, each
#     listing the folders it uses directly exactly as the CMake files declare them.
# The include views make most graph violations compile errors already; this test also names
# them, catches the third-party rules and a layout table that no longer says what CMake does.
# Prints one line per violation and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
deps_file=${1:?usage: scripts/check_deps.sh BUILD_DIR/kvcodec_deps.txt}
if [[ ! -s $deps_file ]]; then
  echo "check_deps: $deps_file is missing or empty (configure the build first)"
  exit 1
fi

grep -rnE --include='*.h' --include='*.cc' --include='*.hpp' --include='*.c' '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' src |
  awk -v deps_file="$deps_file" '
function sorted_list(csv, sep,    parts, n, i, j, t, seen, out, m) {
  n = split(csv, parts, /[, ]+/)
  m = 0
  for (i = 1; i <= n; i++) {
    if (parts[i] == "" || parts[i] == "-" || (parts[i] in seen)) continue
    seen[parts[i]] = 1
    out[++m] = parts[i]
  }
  for (i = 2; i <= m; i++) {
    t = out[i]
    for (j = i - 1; j >= 1 && out[j] > t; j--) out[j + 1] = out[j]
    out[j + 1] = t
  }
  t = ""
  for (i = 1; i <= m; i++) t = t (i > 1 ? sep : "") out[i]
  return t
}
function without(csv, drop,    parts, n, i, t) {
  n = split(csv, parts, ",")
  t = ""
  for (i = 1; i <= n; i++) if (parts[i] != drop && parts[i] != "") t = t (t == "" ? "" : ",") parts[i]
  return t
}
function fail(msg) {
  print msg
  failures++
}
BEGIN {
  while ((getline line < deps_file) > 0) {
    split(line, f, " ")
    if (f[1] == "module") {
      # module <name> <folder> <direct folders> <closure>
      module_folder[f[3]] = 1
      closure[f[3]] = sorted_list(closure[f[3]] "," f[5], ",")
      direct[f[3]] = sorted_list(direct[f[3]] "," without(f[4], f[3]), ",")
    } else if (f[1] == "source") {
      source_closure[f[2]] = f[3] == "-" ? "" : f[3]
    }
  }
  close(deps_file)
  while ((getline line < "docs/architecture.md") > 0) {
    if (line ~ /^## /) in_section = (line == "## Source layout and dependency graph")
    if (!in_section || line !~ /^\| *`src\/[a-z_]+\/`/) continue
    n = split(line, col, "|")
    folder = col[2]
    gsub(/[ `]|src\/|\//, "", folder)
    uses = col[n - 1]
    names = ""
    while (match(uses, /`[a-z_]+`/)) {
      names = names "," substr(uses, RSTART + 1, RLENGTH - 2)
      uses = substr(uses, RSTART + RLENGTH)
    }
    readme[folder] = sorted_list(names, ",")
  }
  close("docs/architecture.md")
}
{
  # path:line:text
  path = $0
  sub(/:.*/, "", path)
  text = $0
  sub(/^[^:]*:[0-9]+:/, "", text)
  folder = path
  sub(/^src\//, "", folder)
  sub(/\/.*/, "", folder)
  if (match(text, /"[^"]+"/)) {
    target = substr(text, RSTART + 1, RLENGTH - 2)
    if (target !~ /\//) next
    first = target
    sub(/\/.*/, "", first)
    if (!(first in module_folder)) next
    if (path in source_closure) {
      allowed = source_closure[path]
      who = "what it links gives it"
    } else if (folder in module_folder) {
      allowed = closure[folder]
      who = folder " may use"
    } else {
      next
    }
    if (index("," allowed ",", "," first ",") == 0) {
      shown = sorted_list(without(allowed, folder), ", ")
      fail(path " includes " target ": " who " " (shown == "" ? "nothing" : shown))
    }
  } else if (match(text, /<[^>]+>/)) {
    target = substr(text, RSTART + 1, RLENGTH - 2)
    if ((target == "llama.h" || target ~ /^ggml[^\/]*\.h$/) && folder != "llama") {
      fail(path " includes <" target ">: llama.cpp only in src/llama/")
    } else if (target == "httplib.h" && folder != "serve") {
      fail(path " includes <" target ">: cpp-httplib only in src/serve/")
    } else if (target ~ /^pybind11\// && folder != "python") {
      fail(path " includes <" target ">: pybind11 only in src/python/")
    } else if (target ~ /^zstd/ && folder != "bench") {
      fail(path " includes <" target ">: libzstd only in src/bench/")
    } else if (target ~ /^libav[a-z]*\// && folder != "libav") {
      fail(path " includes <" target ">: libavcodec only in src/libav/")
    }
  }
}
END {
  for (folder in module_folder) {
    if (!(folder in readme)) {
      fail("docs/architecture.md: no row for src/" folder "/ in \"Source layout and dependency graph\"")
    } else if (readme[folder] != direct[folder]) {
      fail("docs/architecture.md says " folder " uses " (readme[folder] == "" ? "nothing" : sorted_list(readme[folder], ", ")) \
           "; its CMakeLists.txt declares " (direct[folder] == "" ? "nothing" : sorted_list(direct[folder], ", ")))
    }
  }
  for (folder in readme) {
    if (!(folder in module_folder)) fail("docs/architecture.md: src/" folder "/ has a row but is no module")
  }
  if (failures > 0) {
    print failures " dependency graph violation(s)"
    exit 1
  }
  print "deps.graph: every include in src/ follows the graph; docs/architecture.md matches CMake"
}'
