#!/usr/bin/env bash
# make_stub.sh REAL_LIB OUT_DIR [exit|zero]: writes OUT_DIR/<soname of REAL_LIB>, a library with the same
# soname, exported symbols, symbol versions and object sizes, and no code: every function in it
# prints which library was stubbed and exits 70. libavcodec (and OpenBLAS for kvcodec's PCA) load
# ~80 libraries (AV1, JPEG XL, SVG, cairo, ICU, ...), 200 MB, that the check never calls; Debian
# links them with -z now, so each must resolve, but none must work. Needs no C library itself.
# zero: functions return 0 instead, for the few libraries libavcodec asks for their capabilities
# while it lists its codecs (libaom, libvpx: av_codec_iterate runs each codec's init_static_data);
# 0 there reads as "no capabilities".
set -euo pipefail
real=$1
out_dir=$2
mode=${3:-exit}
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ -n $soname ]] || soname=$(basename "$real")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# nm prints "value size type name[@@VER|@VER]" (size absent for some).
nm -D --defined-only -S "$real" | awk -v soname="$soname" -v mode="$mode" -v asm="$work/stub.S" -v vs="$work/stub.map" '
  function hex(s,   i, v) { v = 0; for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1; return v }
  {
    if (NF == 4) { type = $3; name = $4; size = hex($2) } else { type = $2; name = $3; size = 0 }
    if (type == "A" || type == "a") next
    ver = ""; dflt = 1
    if (index(name, "@@")) { split(name, p, "@@"); name = p[1]; ver = p[2] }
    else if (index(name, "@")) { split(name, p, "@"); name = p[1]; ver = p[2]; dflt = 0 }
    if (name !~ /^[A-Za-z_][A-Za-z0-9_.$]*$/) next
    n++
    label = (ver == "") ? name : sprintf("kvcstub_%d", n)
    if (type ~ /^[TtWiI]$/) {
      body = (mode == "zero") ? "xor %eax, %eax; ret" : "jmp kvc_stub_fail"
      printf ".text\n.globl %s\n.type %s,@function\n%s: %s\n", label, label, label, body >> asm
    } else {
      if (size < 1) size = 8
      printf ".bss\n.balign 16\n.globl %s\n.type %s,@object\n.size %s,%d\n%s: .zero %d\n", label, label, label, size, label, size >> asm
    }
    if (ver != "") {
      printf ".symver %s,%s%s%s\n", label, name, dflt ? "@@" : "@", ver >> asm
      vers[ver] = 1
    }
  }
  END {
    msg = "kvcodec bundle: " soname " is a stub here (a code path the GPU check does not expect called it)\n"
    printf ".text\nkvc_stub_fail:\n mov $1, %%eax\n mov $2, %%edi\n lea kvc_stub_msg(%%rip), %%rsi\n mov $%d, %%edx\n syscall\n mov $231, %%eax\n mov $70, %%edi\n syscall\n hlt\n", length(msg) >> asm
    gsub(/\n/, "\\n", msg)
    printf ".section .rodata\nkvc_stub_msg: .ascii \"%s\"\n.section .note.GNU-stack,\"\",@progbits\n", msg >> asm
    first = 1
    for (v in vers) {
      if (first) { printf "%s { local: kvcstub_*; };\n", v >> vs; first = 0 }
      else printf "%s { };\n", v >> vs
    }
  }'
[[ -f $work/stub.S ]] || : > "$work/stub.S"
map_args=()
[[ -s $work/stub.map ]] && map_args=("-Wl,--version-script=$work/stub.map")
gcc -shared -nostdlib -Wl,-soname,"$soname" -Wl,-z,noexecstack "${map_args[@]}" -o "$out_dir/$soname" "$work/stub.S"
