//! `schedule::kernel_graph` names a kernel's inputs after the graph's inputs, and its
//! computed inputs `v<index>`: the two must never collide (a graph cut at gradient buckets
//! once named an input `v10` and failed to compile).

use kiln_ir::text::parse_graph;
use kiln_ir::NodeId;
use kiln_passes::schedule::kernel_graph;
use kiln_passes::GroupKind;

#[test]
fn computed_inputs_never_take_a_graph_input_name() {
    // %v2 is input 0 (node 0); node 2 is computed (a + v2)
    let g = parse_graph(
        "graph @g(%v2: f32[4], %a: f32[4]) -> f32[4] {\n  %s = add %a, %v2 : f32[4]\n  %t = mul %s, %v2 : f32[4]\n  return %t\n}\n",
    )
    .unwrap();
    let ids: Vec<NodeId> = g.nodes().map(|(id, _)| id).collect();
    let (v2, s, t) = (ids[0], ids[2], ids[3]);
    assert_eq!(s.index(), 2);
    let k = kernel_graph(&g, 0, GroupKind::Pointwise, &[t], &[v2, s], &[t]).unwrap();
    let names: Vec<&str> = k.inputs().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["v2", "v2_"]);
}
