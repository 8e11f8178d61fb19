//! Chat templates come from GGUF files, so they are untrusted: a template that loops
//! without end, recurses, or builds huge strings must end quickly with an error, holding
//! little memory, and ordinary templates with long prompts must still render.
//!
//! Memory is measured by a counting allocator, per thread, so tests running in parallel
//! do not see each other's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use brass::tokenizer::{render_chat_template, ChatMessage};

struct PerThreadPeak;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grow(bytes: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + bytes;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn shrink(bytes: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(bytes)));
}

// SAFETY: every call is passed on to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for PerThreadPeak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            shrink(layout.size());
            grow(new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: PerThreadPeak = PerThreadPeak;

/// Renders `template` for one short user message; returns the result, the most memory
/// the render held at once beyond what the thread held before, and the time it took.
fn render_measured(template: &str) -> (brass::Result<String>, usize, Duration) {
    let messages = [ChatMessage::user("hi")];
    let before = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let start = Instant::now();
    let result = render_chat_template(template, &messages, true, "<s>", "</s>");
    let elapsed = start.elapsed();
    let peak = PEAK.with(Cell::get) - before;
    (result, peak, elapsed)
}

/// A render that the budget must stop: an error naming `expected`, in little memory and
/// time.
fn assert_stopped(template: &str, expected: &str) {
    let (result, peak, elapsed) = render_measured(template);
    eprintln!("{template:?}: {peak} bytes at peak, {elapsed:?}");
    let err = match result {
        Ok(text) => panic!(
            "the render should have been stopped; it made {} bytes",
            text.len()
        ),
        Err(err) => err,
    };
    assert!(err.to_string().contains(expected), "{err}");
    assert!(peak < 64 << 20, "held {peak} bytes at once");
    // Generous for a loaded machine; without the budget these run for hours.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
}

#[test]
fn nested_range_loops_run_out_of_fuel() {
    assert_stopped(
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}",
        "chat template ran out of its budget of 200001 fuel",
    );
}

#[test]
fn huge_strings_and_lists_are_refused_before_they_are_allocated() {
    // minijinja alone makes strings of up to 10^8 repetitions, and lists of up to 10^8
    // items lazily; the fuel budget refuses the string before it is made, and the list
    // when it is materialised.
    assert_stopped("{{ 'x' * 100000000 }}", "ran out of its budget");
    assert_stopped(
        "{{ (['x'] * 100000000)|list|length }}",
        "ran out of its budget",
    );
    assert_stopped(
        "{{ (['x'] * 100000000)|join|length }}",
        "ran out of its budget",
    );
    assert_stopped(
        "{% set ns = namespace(s='x' * 1000) %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "ran out of its budget",
    );
    assert_stopped(
        "{{ ('x' * 1000).replace('x', 'yyyyyyyyyy' * 1000) }}",
        "ran out of its budget",
    );
}

#[test]
fn big_lists_run_out_of_fuel() {
    assert_stopped(
        "{% for i in range(100000) %}{{ range(100000)|list|length }}{% endfor %}",
        "ran out of its budget",
    );
}

#[test]
fn runaway_macro_recursion_is_an_error() {
    let (result, peak, elapsed) =
        render_measured("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    eprintln!("macro recursion: {peak} bytes at peak, {elapsed:?}");
    let err = result.unwrap_err().to_string();
    assert!(err.contains("recursion limit exceeded"), "{err}");
    assert!(peak < 64 << 20, "held {peak} bytes at once");
}

#[test]
fn output_past_its_limit_is_an_error() {
    // 5 MB of output costs less fuel than the budget, but passes the 1 MiB output limit.
    assert_stopped(
        "{% for i in range(500) %}{{ 'x' * 10000 }}{% endfor %}",
        "chat template output passed its limit of 1048600 bytes (for 6 bytes of messages)",
    );
}

#[test]
fn a_long_prompt_still_renders() {
    let template = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}";
    let content = "All work and no play makes Jack a dull boy. ".repeat(100_000);
    let text = render_chat_template(
        template,
        &[ChatMessage::user(content.as_str())],
        false,
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        text.len(),
        content.len() + "<|im_start|>user\n<|im_end|>\n".len()
    );
}
