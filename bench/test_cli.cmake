# Tests of weft-bench's command line and reports (bench/CMakeLists.txt
# registers them), run as cmake -DBENCH=<weft-bench> -DMODE=cli|peers
# -DPEERS=ON|OFF -DWORK=<scratch dir> -P test_cli.cmake.
#   cli:   bad values of --load, --peers and --load-compare exit 2, before any
#          benchmark runs, with a message that names the flag.
#   peers: a tiny --peers --load-compare run writes the thread accounting,
#          the peer ratios and the loaded pass into results[] (a build
#          without oneTBB: --peers says so and exits 0, and a tiny weft run
#          still has the accounting fields).
#   report: a tiny --report run with --report-trace on a synthetic trace
#          writes index.html and one SVG per figure, each well-formed
#          (-DXMLLINT=<xmllint>; "SKIP:" without it), with the timeline drawn
#          from the trace, the JSON embedded and a progress line per
#          benchmark; bad --report arguments are refused before any run.
cmake_minimum_required(VERSION 3.25)
foreach(v BENCH MODE PEERS WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "test_cli.cmake needs -D${v}=...")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORK})

# Runs weft-bench with the list ARGS; sets rc, out (stdout) and err (stderr).
macro(bench)
  execute_process(COMMAND ${BENCH} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 60)
endmacro()

function(expect_refused expected)
  bench(${ARGN})
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "weft-bench ${ARGN}: exit status ${rc}, expected 2\n${out}${err}")
  endif()
  string(FIND "${err}" "${expected}" at)
  if(at LESS 0)
    message(FATAL_ERROR "weft-bench ${ARGN}: stderr lacks '${expected}':\n${err}")
  endif()
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "weft-bench ${ARGN}: ran something before refusing:\n${out}")
  endif()
endfunction()

# The JSON member at the path ARGN of ${json}: its type into ${type_var}, its value into ${val_var}.
macro(json_get type_var val_var)
  string(JSON ${type_var} ERROR_VARIABLE jerr TYPE "${json}" ${ARGN})
  if(jerr)
    message(FATAL_ERROR "JSON: no member ${ARGN}: ${jerr}")
  endif()
  string(JSON ${val_var} GET "${json}" ${ARGN})
endmacro()

function(expect_type type)
  json_get(t v ${ARGN})
  if(NOT t STREQUAL type)
    message(FATAL_ERROR "JSON: ${ARGN} is ${t} (${v}), expected ${type}")
  endif()
endfunction()

if(MODE STREQUAL "cli")
  expect_refused("--load '-1': expected a number of busy threads in 0..64" --load -1)
  expect_refused("--load 'two': expected a number of busy threads in 0..64" --load two)
  expect_refused("--load '65': expected a number of busy threads in 0..64" --load=65)
  expect_refused("--load '': expected a number of busy threads in 0..64" --load=)
  expect_refused("option --load needs a value" --load)
  expect_refused("option --peers takes no value" --peers=1)
  expect_refused("option --load-compare takes no value" --load-compare=yes)
  expect_refused("--load-compare compares with a loaded pass: --load must be at least 1"
                 --load-compare --load 0)
  if(PEERS)
    expect_refused("no benchmark matches --filter 'no_such_workload' among those with a peer"
                   --peers --filter no_such_workload)
  endif()
  bench(--help)
  foreach(flag "--peers" "--load N" "--load-compare")
    string(FIND "${out}" "${flag}" at)
    if(NOT rc EQUAL 0 OR at LESS 0)
      message(FATAL_ERROR "weft-bench --help (status ${rc}) does not describe ${flag}:\n${out}")
    endif()
  endforeach()
  return()
endif()

if(MODE STREQUAL "report")
  expect_refused("--report-trace draws the timeline of a --report: give --report DIR too"
                 --report-trace ${WORK}/none.json)
  expect_refused("option --report needs a value" --report)
  expect_refused("--report: cannot create the directory '${WORK}/no/such/dir'"
                 --report ${WORK}/no/such/dir)
  if(NOT XMLLINT)
    message("SKIP: xmllint is not installed (Debian: apt-get install libxml2-utils)")
    return()
  endif()
  # Two tracks, a run, a failure and a skip joined by a flow, an instant
  # event, a counter (not drawn) and metadata naming the tracks.
  file(WRITE ${WORK}/synthetic.json [=[
{"traceEvents":[
 {"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"stream 0"}},
 {"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"stream 1 <&>"}},
 {"name":"fill#1","ph":"X","ts":10,"dur":5,"pid":1,"tid":0,"args":{"outcome":"ran","launch":1}},
 {"name":"axpy#2","ph":"X","ts":16.5,"dur":4,"pid":1,"tid":0,"args":{"outcome":"failed"}},
 {"name":"taint","ph":"s","id":7,"ts":20,"pid":1,"tid":0},
 {"name":"reduce#3","ph":"X","ts":22,"dur":3,"pid":1,"tid":1,"args":{"outcome":"skipped"}},
 {"name":"taint","ph":"f","bp":"e","id":7,"ts":22,"pid":1,"tid":1},
 {"name":"reclaim","ph":"i","s":"t","ts":30,"pid":1,"tid":1},
 {"name":"bytes in use","ph":"C","ts":31,"pid":1,"args":{"stream 0":4096}}
]}
]=])
  set(dir ${WORK}/report)
  file(REMOVE_RECURSE ${dir})
  bench(--quick --reps 1 --warmup 0 --scale 0.001 --report ${dir}
        --report-trace ${WORK}/synthetic.json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "weft-bench --report: exit status ${rc}\n${err}")
  endif()
  foreach(part "weft-bench: round 1/1, 1/" "; about " "the report is ${dir}/index.html")
    string(FIND "${err}" "${part}" at)
    if(at LESS 0)
      message(FATAL_ERROR "stderr lacks '${part}':\n${err}")
    endif()
  endforeach()
  set(figures baselines producers streams replay memory failures timeline)
  foreach(f index.html ${figures})
    if(NOT f STREQUAL "index.html")
      set(f ${f}.svg)
    endif()
    if(NOT EXISTS ${dir}/${f})
      message(FATAL_ERROR "--report wrote no ${f}")
    endif()
    execute_process(COMMAND ${XMLLINT} --noout ${dir}/${f} RESULT_VARIABLE lint
                    ERROR_VARIABLE lint_err)
    if(NOT lint EQUAL 0)
      message(FATAL_ERROR "${f} is not well-formed XML:\n${lint_err}")
    endif()
  endforeach()
  file(READ ${dir}/index.html html)
  file(READ ${dir}/timeline.svg timeline)
  foreach(part "<pre id=\"results-json\">{" "&quot;results&quot;: [" "<svg xmlns=" "timeline.svg")
    string(FIND "${html}" "${part}" at)
    if(at LESS 0)
      message(FATAL_ERROR "index.html lacks '${part}'")
    endif()
  endforeach()
  # The timeline: both tracks by name, the three boxes (the failed one red,
  # the skipped one grey), the instant event, the flow's arrow, the footer.
  foreach(part "stream 0" "stream 1 &lt;&amp;&gt;" "fill#1" "axpy#2 (4 µs, failed)" "#c8102e"
               "reduce#3" "#a8a8a8" "reclaim" "marker-end=\"url(#arrow)\""
               "3 events on 2 tracks, 1 flows")
    string(FIND "${timeline}" "${part}" at)
    if(at LESS 0)
      message(FATAL_ERROR "timeline.svg lacks '${part}':\n${timeline}")
    endif()
  endforeach()
  # A trace that is not one is reported, and the page is written without it.
  file(WRITE ${WORK}/bad.json "{\"events\": []}")
  bench(--quick --reps 1 --warmup 0 --scale 0.001 --filter launch_noop_1stream --report ${dir}
        --report-trace ${WORK}/bad.json)
  string(FIND "${err}" "the trace '${WORK}/bad.json' is not drawn: no \"traceEvents\" array" at)
  if(NOT rc EQUAL 1 OR at LESS 0)
    message(FATAL_ERROR "a bad trace: status ${rc}, expected 1 and a message:\n${err}")
  endif()
  execute_process(COMMAND ${XMLLINT} --noout ${dir}/index.html RESULT_VARIABLE lint)
  if(NOT lint EQUAL 0)
    message(FATAL_ERROR "index.html without the timeline is not well-formed")
  endif()
  return()
endif()

if(NOT MODE STREQUAL "peers")
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

set(tiny --quick --reps 2 --warmup 0 --scale 0.05)
if(NOT PEERS)
  bench(--peers)
  string(FIND "${out}" "built without oneTBB" at)
  if(NOT rc EQUAL 0 OR at LESS 0)
    message(FATAL_ERROR "weft-bench --peers without oneTBB: status ${rc}, expected 0 and a "
                        "message:\n${out}${err}")
  endif()
  bench(--filter sched_w1_chain ${tiny} --json ${WORK}/out.json)
else()
  bench(--peers ${tiny} --load-compare --load 1 --json ${WORK}/out.json)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "weft-bench: exit status ${rc}\n${out}${err}")
endif()
file(READ ${WORK}/out.json json)

string(JSON n LENGTH "${json}" results)
set(weft 0)
set(tbb 0)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" results ${i} name)
  if(name MATCHES "^sched_w[123]_")
    math(EXPR weft "${weft} + 1")
    foreach(k cpu_client cpu_scheduler cpu_pool cpu_other futex_waits futex_wakes ctx_switches)
      expect_type(NUMBER results ${i} ${k})
    endforeach()
    # the classes add up to the total (the client is the remainder, clamped at 0)
    json_get(t cpu results ${i} cpu_median)
    json_get(t sched results ${i} cpu_scheduler)
    json_get(t pool results ${i} cpu_pool)
    if(sched LESS_EQUAL 0 OR pool LESS_EQUAL 0 OR cpu LESS_EQUAL 0)
      message(FATAL_ERROR "${name}: scheduler ${sched}, pool ${pool}, total ${cpu} ns per op")
    endif()
  elseif(name MATCHES "^baseline_")
    expect_type(NUMBER results ${i} cpu_other)
    expect_type(NULL results ${i} futex_waits)
  endif()
  if(PEERS AND name MATCHES "^tbb_w[123]_")
    math(EXPR tbb "${tbb} + 1")
    expect_type(NUMBER results ${i} cpu_client)
    expect_type(NUMBER results ${i} cpu_other)
    expect_type(NULL results ${i} futex_waits)
    expect_type(NUMBER results ${i} ctx_switches)
    expect_type(NULL results ${i} peer)
    expect_type(OBJECT results ${i} loaded rise)
  endif()
  if(PEERS AND name MATCHES "^sched_w[123]_")
    json_get(t peer results ${i} peer)
    if(NOT peer MATCHES "^tbb_w[123]_")
      message(FATAL_ERROR "${name}: peer '${peer}'")
    endif()
    foreach(pass "" "loaded")
      expect_type(NUMBER results ${i} ${pass} paired_peer median)
      expect_type(NUMBER results ${i} ${pass} paired_peer cpu_median)
      json_get(t rounds results ${i} ${pass} paired_peer rounds)
      json_get(t cpu_target results ${i} ${pass} paired_peer cpu_target)
      if(NOT rounds EQUAL 2 OR NOT cpu_target MATCHES "^0\\.750*$")
        message(FATAL_ERROR "${name}: paired_peer ${pass}: ${rounds} rounds, cpu_target ${cpu_target}")
      endif()
    endforeach()
    expect_type(NUMBER results ${i} loaded rise cpu_median)
    json_get(t load results ${i} loaded load)
    if(NOT load EQUAL 1)
      message(FATAL_ERROR "${name}: loaded.load is ${load}, expected 1")
    endif()
  endif()
endforeach()
if(weft EQUAL 0)
  message(FATAL_ERROR "no sched_w* result in the report:\n${json}")
endif()
if(PEERS)
  if(NOT weft EQUAL 6 OR NOT tbb EQUAL 3)
    message(FATAL_ERROR "--peers ran ${weft} weft and ${tbb} oneTBB workloads, expected 6 and 3")
  endif()
  foreach(table "peers: run k / the peer's run k" "threads: per operation" "threads (loaded)"
                "load: each round ran unloaded, then beside 1 busy thread")
    string(FIND "${out}" "${table}" at)
    if(at LESS 0)
      message(FATAL_ERROR "the report lacks the table '${table}':\n${out}")
    endif()
  endforeach()
endif()
