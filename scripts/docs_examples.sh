#!/usr/bin/env bash
# docs_examples.sh — keep every command output shown in docs/*.md and README.md equal to what
# the current build prints, so that a worked example cannot go stale unnoticed.
#
#   scripts/docs_examples.sh [--check] [BIN_DIR]   compare (default); exit 1 on a difference
#   scripts/docs_examples.sh --update [BIN_DIR]    rewrite every marked block from the build
#
# BIN_DIR defaults to $PTD_BIN_DIR, else build/bin. Markers are one-line HTML comments (not
# shown when the Markdown is rendered):
#
#   <!-- docs-example: [$ ]COMMAND[ # OPTION; OPTION...] -->
#       directly above a fenced block: the block holds COMMAND's output (stdout and stderr
#       together). A leading "$ " makes the block start with a "$ COMMAND" line. Several
#       markers stacked directly above one block fill it in order. COMMAND is run by bash in a
#       scratch folder that sees the checkout's files (assets/, build/...), with BIN_DIR first
#       on PATH, NO_COLOR=1 and no display; a pipe (`| head -n 20`) is part of the command and
#       is shown. OPTIONS shape what is shown or compared, never the command:
#         head N / tail N   show the first / last N lines (with "..." where lines are left out)
#         match ERE         show the lines matching ERE (combines with head and tail)
#         vary ERE          text matching ERE differs run to run (a run id, a speed): --check
#                           compares it as "<varies>"; --update rewrites a block only when it
#                           differs beyond these, and then writes what this run printed
#   <!-- docs-sample: recorded YYYY-MM-DD at COMMIT[ on HARDWARE]: COMMAND -->
#       directly above a fenced block whose output cannot be produced here (a GPU bench, an
#       SSH cluster, a killed rank). The block is left as it is; the check wants the date, a
#       commit that exists (when git can tell), and the paragraph above the marker to say
#       "recorded" with the same date, so that a reader does not take it for current output.
#   <!-- docs-quotes: COMMAND -->
#       directly above a paragraph (a screenshot's caption, a sentence, a table): every number
#       the paragraph quotes (digits, with , . and % inside; link targets not counted) must
#       occur in COMMAND's output.
#
# A fenced block whose first line is a "$ " prompt must carry a docs-example or docs-sample
# marker. Each distinct COMMAND runs once; commands run four at a time. The scratch folder is
# removed on exit.
set -uo pipefail

mode=check
bin=${PTD_BIN_DIR:-}
for arg in "$@"; do
  case $arg in
    --check) mode=check ;;
    --update) mode=update ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "docs_examples: error: unknown option $arg (allowed: --check, --update)" >&2; exit 2 ;;
    *) bin=$arg ;;
  esac
done
# A bin dir given on the command line or in the environment is relative to where we were called.
[[ -n $bin && $bin != /* ]] && bin=$PWD/$bin
cd "$(dirname "$0")/.." || exit 2
root=$PWD
bin=${bin:-$root/build/bin}
if [[ ! -x $bin/ptd ]]; then
  echo "docs_examples: error: $bin/ptd is not an executable (build first, or pass the bin dir)" >&2
  exit 2
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ptd-docs-examples-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM   # through the EXIT trap: a stopped check leaves nothing behind
# The commands run in $scratch/cwd: it links every top-level entry of the checkout, so relative
# paths in the docs work, while what the commands write (runs/ of a launch) stays in scratch.
mkdir -p "$scratch/cwd" "$scratch/out" "$scratch/config"
for entry in "$root"/* "$root"/.[!.]*; do
  [[ -e $entry && $(basename "$entry") != runs ]] && ln -s "$entry" "$scratch/cwd/$(basename "$entry")"
done

# Text helpers in Perl (part of every Debian build-essential): one place for the regexes.
#   select FILE HEAD TAIL MATCHES   the shown lines ("..." for a gap); MATCHES is \n-separated
#   normalise VARIES                stdin → stdout with each ERE of VARIES replaced by <varies>
#   numbers                         stdin → the numbers a paragraph quotes, one per line
#   has NUMBER FILE                 exit 0 when FILE holds NUMBER as a whole number
# shellcheck disable=SC2016
perl_helpers='
use strict; use warnings;
my $what = shift @ARGV;
if ($what eq "select") {
  my ($file, $head, $tail, $matches) = @ARGV;
  open my $fh, "<", $file or die "$file: $!";
  my @lines = <$fh>; chomp @lines;
  pop @lines while @lines && $lines[-1] =~ /^\s*$/;
  my @match = grep { length } split /\n/, $matches;
  my $all = $head eq "" && $tail eq "" && !@match;
  my ($last_kept, $n) = (-1, scalar @lines);
  for my $i (0 .. $n - 1) {
    my $keep = $all || ($head ne "" && $i < $head) || ($tail ne "" && $i >= $n - $tail)
      || grep { $lines[$i] =~ /$_/ } @match;
    next unless $keep;
    print "...\n" if $i > $last_kept + 1 && !$all;
    print "$lines[$i]\n";
    $last_kept = $i;
  }
  print "...\n" if $last_kept < $n - 1 && !$all && $n > 0;
} elsif ($what eq "normalise") {
  my @varies = grep { length } split /\n/, $ARGV[0];
  while (my $line = <STDIN>) { $line =~ s/$_/<varies>/g for @varies; print $line; }
} elsif ($what eq "numbers") {
  local $/; my $text = <STDIN>;
  $text =~ s/\]\([^)]*\)/]/g;          # link and image targets are not quoted numbers
  $text =~ s/<!--.*?-->//gs;
  # 1,188,139 is one number; [0,1,...,7] holds three.
  while ($text =~ /(?<![\w.\/-])((?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?%?)(?![\w])/g) {
    print "$1\n";
  }
} elsif ($what eq "has") {
  my ($number, $file) = @ARGV;
  open my $fh, "<", $file or die "$file: $!"; local $/; my $text = <$fh>;
  # 1,188,139 and 1188139 are the same number: thousands separators count on neither side.
  $number =~ s/,//g;
  $text =~ s/(?<=[0-9]),(?=[0-9]{3}(?![0-9]))//g;
  exit($text =~ /(?<![\w.])\Q$number\E(?![\w]|\.[0-9])/ ? 0 : 1);
}
'
helper() { perl -e "$perl_helpers" "$@"; }

docs=("$root"/docs/*.md "$root/README.md")
declare -A command_id=()   # command → id of its output file under $scratch/out
commands=()
problems=0

# register COMMAND: give COMMAND an id the first time, so each distinct command runs once.
register() {
  local command=$1
  if [[ -z ${command_id[$command]+set} ]]; then
    command_id[$command]=${#commands[@]}
    commands+=("$command")
  fi
}

# Parse one marker line of kind docs-example into globals: m_prompt, m_command, m_options.
parse_example() {
  local body=$1
  m_prompt=0
  [[ $body == '$ '* ]] && { m_prompt=1; body=${body#'$ '}; }
  if [[ $body == *' # '* ]]; then
    m_command=${body%% # *}
    m_options=${body#* # }
  else
    m_command=$body
    m_options=
  fi
}

example_re='^[[:space:]]*<!-- docs-example: (.*) -->[[:space:]]*$'
sample_re='^[[:space:]]*<!-- docs-sample: (.*) -->[[:space:]]*$'
quotes_re='^[[:space:]]*<!-- docs-quotes: (.*) -->[[:space:]]*$'
fence_re='^([[:space:]]*)(```+)'

# Pass 1: every command a marker names, so they can all run before any comparison.
for doc in "${docs[@]}"; do
  while IFS= read -r line; do
    if [[ $line =~ $example_re ]]; then
      parse_example "${BASH_REMATCH[1]}"
      register "$m_command"
    elif [[ $line =~ $quotes_re ]]; then
      register "${BASH_REMATCH[1]}"
    fi
  done <"$doc"
done

# Pass 2: run each command once (four at a time).
run_one() {
  local id=$1 command=$2 first
  first=${command%% *}
  if [[ $first == ptd* || $first == bench_* ]] && [[ ! -x $bin/$first ]]; then
    echo "$bin/$first" >"$scratch/out/$id.missing"
    return
  fi
  (cd "$scratch/cwd" && env -u DISPLAY -u WAYLAND_DISPLAY -u COLUMNS -u PTD_ASSETS \
    PATH="$bin:$PATH" NO_COLOR=1 TERM=dumb XDG_CONFIG_HOME="$scratch/config" \
    timeout 300 bash -c "$command" </dev/null >"$scratch/out/$id" 2>&1)
}
for id in "${!commands[@]}"; do
  while (($(jobs -rp | wc -l) >= 4)); do wait -n; done
  run_one "$id" "${commands[$id]}" &
done
wait

# The block a group of docs-example markers stands for, into $scratch/block.
make_block() {  # INDENT MARKER_BODY...
  local indent=$1 body head tail matches option
  shift
  : >"$scratch/block"
  for body in "$@"; do
    parse_example "$body"
    head="" tail="" matches=""
    IFS=';' read -ra opts <<<"$m_options"
    for option in "${opts[@]}"; do
      option=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<<"$option")
      case $option in
        head\ *) head=${option#head } ;;
        tail\ *) tail=${option#tail } ;;
        match\ *) matches+=${option#match }$'\n' ;;
        vary\ *) ;;
        '') ;;
        *) echo "docs_examples: error: unknown option '$option' in a docs-example of '$m_command'" >&2
           problems=$((problems + 1)) ;;
      esac
    done
    ((m_prompt)) && printf '$ %s\n' "$m_command" >>"$scratch/block"
    helper select "$scratch/out/${command_id[$m_command]}" "$head" "$tail" "$matches" >>"$scratch/block"
  done
  if [[ -n $indent ]]; then
    sed -i "s/^\(.\)/$indent\1/" "$scratch/block"
  fi
}

# The vary EREs of a group of markers, newline-separated.
varies_of() {
  local body option varies=
  for body in "$@"; do
    parse_example "$body"
    IFS=';' read -ra opts <<<"$m_options"
    for option in "${opts[@]}"; do
      option=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<<"$option")
      [[ $option == vary\ * ]] && varies+=${option#vary }$'\n'
    done
  done
  printf '%s' "$varies"
}

# missing_tool LINE COMMAND...: succeed, naming the tool on stderr, when one of the commands needs a
# program this build does not have (ptd-studio without imgui); its examples are skipped.
missing_tool() {
  local line=$1 command id
  shift
  for command in "$@"; do
    id=${command_id[$command]}
    if [[ -f $scratch/out/$id.missing ]]; then
      echo "$rel:$line: skipped '$command': $(cat "$scratch/out/$id.missing") is not built" >&2
      skipped=$((skipped + 1))
      return 0
    fi
  done
  return 1
}

examples=0 samples=0 quotes=0 skipped=0
# Pass 3: walk every doc, compare (or rewrite) each marked block, check samples and quotes.
for doc in "${docs[@]}"; do
  rel=${doc#"$root"/}
  mapfile -t lines <"$doc"
  n=${#lines[@]}
  new=()
  changed=0
  i=0
  while ((i < n)); do
    line=${lines[i]}
    if [[ $line =~ $example_re ]]; then
      group=() start=$i
      while ((i < n)) && [[ ${lines[i]} =~ $example_re ]]; do
        group+=("${BASH_REMATCH[1]}")
        new+=("${lines[i]}")
        i=$((i + 1))
      done
      parse_example "${group[0]}"
      label=$m_command
      ((${#group[@]} > 1)) && label+=" (and $((${#group[@]} - 1)) more)"
      if ! ((i < n)) || ! [[ ${lines[i]} =~ $fence_re ]]; then
        echo "$rel:$((start + 1)): docs-example of '$label' is not directly above a fenced block"
        problems=$((problems + 1))
        continue
      fi
      indent=${BASH_REMATCH[1]}
      new+=("${lines[i]}")
      open=$i
      i=$((i + 1))
      while ((i < n)) && ! [[ ${lines[i]} =~ ^[[:space:]]*\`\`\`[[:space:]]*$ ]]; do i=$((i + 1)); done
      if ((i >= n)); then
        echo "$rel:$((open + 1)): fenced block under docs-example of '$label' is never closed"
        problems=$((problems + 1))
        break
      fi
      commands_of_group=()
      for body in "${group[@]}"; do parse_example "$body"; commands_of_group+=("$m_command"); done
      if missing_tool $((start + 1)) "${commands_of_group[@]}"; then
        while ((open < i)); do new+=("${lines[open + 1]}"); open=$((open + 1)); done
        i=$((i + 1))
        continue
      fi
      examples=$((examples + 1))
      make_block "$indent" "${group[@]}"
      if ((i > open + 1)); then
        printf '%s\n' "${lines[@]:open+1:i-open-1}" >"$scratch/doc-block"
      else
        : >"$scratch/doc-block"
      fi
      varies=$(varies_of "${group[@]}")
      differs=0
      if ! cmp -s <(helper normalise "$varies" <"$scratch/doc-block") \
        <(helper normalise "$varies" <"$scratch/block"); then
        differs=1
        if [[ $mode == update ]]; then
          changed=1
        else
          echo "$rel:$((start + 1)): example of '$label' differs from what the build prints"
          diff -u --label "$rel (as written)" --label "build/bin (now)" \
            <(helper normalise "$varies" <"$scratch/doc-block") \
            <(helper normalise "$varies" <"$scratch/block") | sed -n '3,22p'
          problems=$((problems + 1))
        fi
      fi
      if [[ $mode == update && $differs == 1 ]]; then
        mapfile -t generated <"$scratch/block"
        new+=("${generated[@]}")
      else
        new+=("${lines[@]:open+1:i-open-1}")
      fi
      new+=("${lines[i]}")
      i=$((i + 1))
      continue
    elif [[ $line =~ $sample_re ]]; then
      samples=$((samples + 1))
      body=${BASH_REMATCH[1]}
      if [[ $body =~ ^recorded\ ([0-9]{4}-[0-9]{2}-[0-9]{2})\ at\ ([0-9a-f]{7,40})(\ on\ [^:]+)?:\ (.+)$ ]]; then
        date=${BASH_REMATCH[1]} commit=${BASH_REMATCH[2]}
        if git -C "$root" rev-parse --git-dir >/dev/null 2>&1 &&
          ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
          echo "$rel:$((i + 1)): docs-sample names commit $commit, which this checkout does not have"
          problems=$((problems + 1))
        fi
        # The paragraph above the marker, as one line.
        j=$((i - 1)) above=
        while ((j >= 0)) && [[ -z ${lines[j]//[[:space:]]/} ]]; do j=$((j - 1)); done
        while ((j >= 0)) && [[ -n ${lines[j]//[[:space:]]/} ]]; do above="${lines[j]} $above"; j=$((j - 1)); done
        if ! [[ ${above,,} == *recorded* && $above == *"$date"* ]]; then
          echo "$rel:$((i + 1)): the text above a docs-sample must say it was recorded on $date"
          problems=$((problems + 1))
        fi
      else
        echo "$rel:$((i + 1)): docs-sample must read 'recorded YYYY-MM-DD at COMMIT[ on HARDWARE]: COMMAND'"
        problems=$((problems + 1))
      fi
      if ! ((i + 1 < n)) || ! [[ ${lines[i + 1]} =~ $fence_re ]]; then
        echo "$rel:$((i + 1)): docs-sample is not directly above a fenced block"
        problems=$((problems + 1))
        new+=("$line")
        i=$((i + 1))
        continue
      fi
      # Keep the sample and its block as they are.
      new+=("$line" "${lines[i + 1]}")
      i=$((i + 2))
      while ((i < n)) && ! [[ ${lines[i]} =~ ^[[:space:]]*\`\`\`[[:space:]]*$ ]]; do new+=("${lines[i]}"); i=$((i + 1)); done
      ((i < n)) && new+=("${lines[i]}")
      i=$((i + 1))
      continue
    elif [[ $line =~ $quotes_re ]]; then
      command=${BASH_REMATCH[1]}
      new+=("$line")
      if missing_tool $((i + 1)) "$command"; then i=$((i + 1)); continue; fi
      quotes=$((quotes + 1))
      j=$((i + 1))
      paragraph=()
      while ((j < n)) && [[ -n ${lines[j]//[[:space:]]/} ]]; do paragraph+=("${lines[j]}"); j=$((j + 1)); done
      missing=()
      while IFS= read -r number; do
        helper has "$number" "$scratch/out/${command_id[$command]}" || missing+=("$number")
      done < <(printf '%s\n' "${paragraph[@]}" | helper numbers)
      if ((${#missing[@]})); then
        echo "$rel:$((i + 1)): quotes ${missing[*]}, which '$command' does not print"
        problems=$((problems + 1))
      fi
      i=$((i + 1))
      continue
    elif [[ $line =~ $fence_re ]]; then
      # An unmarked block: fine, unless it shows a prompt (then it poses as an example).
      new+=("$line")
      if ((i + 1 < n)) && [[ ${lines[i + 1]} =~ ^[[:space:]]*\$\  ]]; then
        prompt=${lines[i + 1]#"${lines[i + 1]%%[![:space:]]*}"}
        echo "$rel:$((i + 2)): '$prompt' shows a command's output without a docs-example or docs-sample marker"
        problems=$((problems + 1))
      fi
      i=$((i + 1))
      while ((i < n)) && ! [[ ${lines[i]} =~ ^[[:space:]]*\`\`\`[[:space:]]*$ ]]; do new+=("${lines[i]}"); i=$((i + 1)); done
      ((i < n)) && new+=("${lines[i]}")
      i=$((i + 1))
      continue
    fi
    new+=("$line")
    i=$((i + 1))
  done
  if ((changed)); then
    printf '%s\n' "${new[@]}" >"$doc"
    echo "docs_examples: updated $rel"
  fi
done

summary="$examples examples, $samples recorded samples, $quotes quoted paragraphs from ${#commands[@]} commands"
((skipped)) && summary+=" ($skipped skipped: programs not built)"
if ((problems)); then
  echo "docs_examples: $problems problem(s) in $summary; run scripts/docs_examples.sh --update to take the build's output" \
    "(accuracy.md's tables of bench_accuracy summaries: scripts/accuracy_tables.py)" >&2
  exit 1
fi
echo "docs_examples: $mode: $summary: ok"
