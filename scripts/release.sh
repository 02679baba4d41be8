#!/usr/bin/env bash
# The steps of the release workflow (.github/workflows/release.yml) that are not building,
# here so they run the same on the forge and in tests/release.rs:
#   release.sh version <tag>                          prints Cargo.toml's version; fails unless
#                                                     the tag is v<that version>
#   release.sh package <binary> <version> <target> <dir>
#                                                     writes <dir>/loopr-<version>-<target>.tar.gz
#                                                     holding the single file `loopr`; prints it
#   release.sh checksums <dir>                        writes <dir>/SHA256SUMS over its tarballs
set -euo pipefail

fail() {
    echo "release.sh: $*" >&2
    exit 1
}

case ${1:-} in
    version)
        [[ $# == 2 ]] || fail "usage: release.sh version <tag>"
        tag=$2
        cd "$(dirname "$0")/.."
        # `path+file:///…#loopr@0.1.0`, or `…#0.1.0` when the folder is named loopr.
        id=$(cargo pkgid --quiet)
        version=${id##*[#@]}
        [[ $tag == "v$version" ]] ||
            fail "tag $tag does not match Cargo.toml's version $version; tag v$version, or change the version in Cargo.toml"
        echo "$version"
        ;;
    package)
        [[ $# == 5 ]] || fail "usage: release.sh package <binary> <version> <target> <dir>"
        binary=$2 version=$3 target=$4 dir=$5
        [[ -f $binary ]] || fail "no binary at $binary; build it first"
        mkdir -p "$dir"
        staging=$(mktemp -d)
        trap 'rm -rf "$staging"' EXIT
        cp "$binary" "$staging/loopr"
        chmod 755 "$staging/loopr"
        asset="$dir/loopr-$version-$target.tar.gz"
        tar -C "$staging" -czf "$asset" loopr
        echo "$asset"
        ;;
    checksums)
        [[ $# == 2 ]] || fail "usage: release.sh checksums <dir>"
        cd "$2"
        shopt -s nullglob
        assets=(loopr-*.tar.gz)
        [[ ${#assets[@]} -gt 0 ]] || fail "no loopr-*.tar.gz in $2 to sum"
        sha256sum "${assets[@]}" >SHA256SUMS
        ;;
    *)
        fail "usage: release.sh version <tag> | package <binary> <version> <target> <dir> | checksums <dir>"
        ;;
esac
