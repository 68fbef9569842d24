#!/bin/sh
# usage: test_install.sh BUILD_DIR [LIBDIR]  (LIBDIR: CMAKE_INSTALL_LIBDIR, default lib)
# `cmake --install` of the build into a scratch prefix, then a program that
# uses the C API built against it twice, as README's "Using it" says: through
# find_package(kjit) and through pkg-config; both run (a compile-only
# context: no GPU needed), and the installed CLI prewarms a kernel.
set -eu
build=$1
libdir=${2:-lib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
[ -f "$tmp/prefix/$libdir/libkjit.so" ] || { echo "no libkjit.so under $tmp/prefix/$libdir"; exit 1; }
# A sanitizer build's library needs its runtime loaded first in every
# program: packaging is checked on the plain build.
if readelf -d "$tmp/prefix/$libdir/libkjit.so" 2>/dev/null | grep -q libasan; then
    echo "a sanitizer build: skipped"
    exit 77
fi
mkdir "$tmp/app"
cat >"$tmp/app/main.c" <<'C'
#include <kjit.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    kjit_ctx_options o;
    kjit_ctx_options_init(&o);
    o.device = KJIT_NO_DEVICE;
    o.cache_dir = "";
    kjit_ctx *c = NULL;
    if (kjit_ctx_create(&c, &o)) {
        fprintf(stderr, "kjit_ctx_create: %s\n", kjit_last_error());
        return 1;
    }
    const int ok = strcmp(kjit_ctx_arch(c), "sm_90") == 0 && !kjit_ctx_has_device(c);
    kjit_ctx_destroy(c);
    printf("installed kjit: %s\n", ok ? "ok" : "unexpected context");
    return !ok;
}
C
cat >"$tmp/app/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.18)
project(kjit_install_check C)
find_package(kjit REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE kjit::kjit)
C
cmake -S "$tmp/app" -B "$tmp/app/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cfg.log" 2>&1 || { cat "$tmp/cfg.log"; exit 1; }
cmake --build "$tmp/app/b" >"$tmp/bld.log" 2>&1 || { cat "$tmp/bld.log"; exit 1; }
"$tmp/app/b/app"
pc=$(PKG_CONFIG_PATH="$tmp/prefix/$libdir/pkgconfig" pkg-config --cflags --libs kjit)
${CC:-cc} "$tmp/app/main.c" -o "$tmp/app/pc" $pc
LD_LIBRARY_PATH="$tmp/prefix/$libdir" "$tmp/app/pc"
# examples/embed.c built with the line in its header (linked, not run: it
# needs the driver library to start).
src=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$cuda/lib64/stubs/libcuda.so" ]; then
    ${CC:-cc} "$src/examples/embed.c" -o "$tmp/app/embed" $pc -I"$cuda/include" -L"$cuda/lib64/stubs" -lcuda -lm
    echo "examples/embed.c: builds with its header's line"
fi
"$tmp/prefix/bin/kjit" prewarm --ops timestep_sinusoid --hidden 256 --dtype fp32 --arch sm_90 \
    --cache-dir "$tmp/cache" | tail -n 1
ls "$tmp/cache"/*.cubin >/dev/null
echo "test_install: ok"
