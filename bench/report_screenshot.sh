#!/usr/bin/env bash
# Renders a result set's report.html in headless Chromium, as a reader's
# browser would open it from disk (no network: the page needs none), and
# writes report-screenshot.png beside it. Fails when the page logs anything to
# the browser console (an error in the page) or the screenshot is not written.
#
#   bash bench/report_screenshot.sh SET_DIR      # SET_DIR/report.html (accel-bench report --html)
#   WIDTH=1400 HEIGHT=2400 bash bench/report_screenshot.sh SET_DIR
#
# Needs Debian's chromium (scripts/setup.sh --bench installs it). Not part of
# any test command.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "report_screenshot: error: $*" >&2; exit 1; }
say() { echo "report_screenshot: $*" >&2; }
case "${1:-}" in -h|--help|"") sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ -n "${1:-}" ]; exit $? ;; esac
[ $# -eq 1 ] || die "one argument: the result set's folder"
set_dir=$(cd "$1" && pwd) || die "no folder $1"
page=$set_dir/report.html
[ -f "$page" ] || die "no $page (accel-bench report --html $1 writes it)"
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || die "no chromium (scripts/setup.sh --bench installs Debian's)"
WIDTH=${WIDTH:-1400} HEIGHT=${HEIGHT:-2400}
shot=$set_dir/report-screenshot.png
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -f "$shot"
# Console messages go to stderr with --enable-logging=stderr as
# "CONSOLE(line)" entries; a page without script or network has none.
"$browser" --headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
  --enable-logging=stderr --v=0 --hide-scrollbars --window-size="$WIDTH,$HEIGHT" \
  --screenshot="$tmp/shot.png" "file://$page" >"$tmp/log" 2>&1 || die "chromium failed: $(tail -n 3 "$tmp/log")"
if grep -E 'CONSOLE|Uncaught|Failed to load resource' "$tmp/log" >"$tmp/console"; then
  cat "$tmp/console" >&2
  die "the page logged to the console (above)"
fi
[ -s "$tmp/shot.png" ] || die "no screenshot written: $(tail -n 3 "$tmp/log")"
mv "$tmp/shot.png" "$shot"
say "$shot ($(stat -c %s "$shot") bytes, ${WIDTH}x$HEIGHT; $(wc -l <"$tmp/log") log lines, no console messages)"
