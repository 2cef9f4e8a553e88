#!/bin/sh
# Builds the pkg-config consumer: the flags come from custream.pc (PKG_CONFIG_PATH must name
# <prefix>/<libdir>/pkgconfig). Usage: build.sh <output-binary>
set -eu
here=$(dirname "$0")
${CXX:-c++} -std=c++17 -o "$1" "$here/../consumer.cpp" $(pkg-config --cflags --libs custream) \
  -Wl,-rpath,"$(pkg-config --variable=libdir custream)"
