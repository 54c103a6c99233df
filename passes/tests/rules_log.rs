//! `KILN_LOGS=rules`: each optimisation logs how often each rewrite rule fired, as a
//! `tracing` event with target `kiln::rules`, when the subscriber wants that target (the
//! frontend's, for `KILN_LOGS=rules`, wants exactly the categories named).

use kiln_ir::text::parse_module;
use kiln_passes::optimize::{optimize, OptimizeOptions};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Collects each event as `target: message`, wanting only the `kiln::rules` target (as the
/// frontend's subscriber does for `KILN_LOGS=rules`).
struct Capture(Arc<Mutex<Vec<String>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.target() == "kiln::rules"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        let line = format!("{}: {}", event.metadata().target(), m.0);
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn kiln_logs_rules_logs_which_rules_fired() {
    let g = parse_module(
        r#"
graph @twice(%x: f32[4,8]) -> f32[4,8] {
  %0 = transpose %x {dim0 = 0, dim1 = 1}   : f32[8,4]
  %1 = transpose %0 {dim0 = 0, dim1 = 1}   : f32[4,8]
  %2 = mul %1, 1.0                         : f32[4,8]
  return %2
}
"#,
    )
    .unwrap()
    .remove(0);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let report = tracing::subscriber::with_default(Capture(lines.clone()), || {
        optimize(&g, &OptimizeOptions::default()).unwrap().report
    });
    let lines = lines.lock().unwrap();
    let rules: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("kiln::rules: "))
        .collect();
    assert_eq!(rules.len(), 1, "one event per optimisation: {lines:?}");
    assert!(
        rules[0].starts_with("kiln::rules: @twice: rules fired: "),
        "{}",
        rules[0]
    );
    for (rule, n) in &report.rules_fired {
        assert!(
            rules[0].contains(&format!("{rule} {n}")),
            "{rule}: {}",
            rules[0]
        );
    }
    assert!(rules[0].contains("transpose-transpose 1"), "{}", rules[0]);
    assert!(
        !lines.iter().any(|l| l.starts_with("kiln::passes")),
        "`rules` does not turn on `passes`: {lines:?}"
    );
}
