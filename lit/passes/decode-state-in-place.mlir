// RUN: loam-opt %s -p decode-state-in-place | filecheck %s
// RUN: loam-opt %s -p decode-state-in-place > %t.mlir && %python -m loam.backends.numpy_module %t.mlir | filecheck %s --check-prefix=MODULE

// A past input joined with the step's new rows along its growing axis and returned as an output
// becomes kernel.append_state naming the input.  The second Concat joins an input with itself (an
// input read twice is not a past), the third is not returned, the fourth's first operand has a
// number for its extent: all three stay Concats.
// CHECK:       loam.notes = ["decode state in place: 1 past input(s) joined with their new rows ('past' -> 'present' along Past)
// CHECK-LABEL: kernel.program "forward"
// CHECK:       %present = kernel.append_state(%past, %new) {axis = 1 : i64, state = "past", node = "cat"}
// CHECK:       %both = kernel.concat(%new, %new)
// CHECK:       %inner = kernel.concat(%other, %new)
// CHECK:       %fixed = kernel.concat(%short, %new)

// The module's forward takes the state by keyword and hands it to the op; forward_in_place takes every
// input but the past, and DECODE_STATE names the batch extent to give.  PAGED_PASTS: the past is read
// only by its append and the joined past only by the return, so a state may keep it in pages.
// MODULE:      def forward(weights: "Weights", new: np.ndarray, past: np.ndarray, short: np.ndarray, other: np.ndarray, *, decode_state: "DecodeState | None" = None)
// MODULE:      present = kernel_append_state(past, new, decode_state, axis=1, state='past')
// MODULE:      DECODE_STATE = (('past', 'present', 1, ('b', None, 4)),)
// MODULE:      PAGED_PASTS = True
// MODULE:      def forward_in_place(weights: "Weights", state: "DecodeState", new: np.ndarray, short: np.ndarray, other: np.ndarray)
// MODULE-NEXT: """forward on new, short, other and the pasts kept in `state`
// MODULE:      return state.step(weights, (new, short, other, ))
// MODULE:      class DecodeState:

kernel.program "forward" (%new : !tensor_axes.tensor<f32, [B: b, New: n, D: 4]>, %past : !tensor_axes.tensor<f32, [B: b, Past: p, D: 4]>, %short : !tensor_axes.tensor<f32, [B: b, Two: 2, D: 4]>, %other : !tensor_axes.tensor<f32, [B: b, Past: p, D: 4]>) names ["new", "past", "short", "other"] {
  %present = kernel.concat(%past, %new) {axis = 1 : i64, node = "cat"} : (!tensor_axes.tensor<f32, [B: b, Past: p, D: 4]>, !tensor_axes.tensor<f32, [B: b, New: n, D: 4]>) -> !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>
  %both = kernel.concat(%new, %new) {axis = 1 : i64, node = "both"} : (!tensor_axes.tensor<f32, [B: b, New: n, D: 4]>, !tensor_axes.tensor<f32, [B: b, New: n, D: 4]>) -> !tensor_axes.tensor<f32, [B: b, Twice: 2*n, D: 4]>
  %inner = kernel.concat(%other, %new) {axis = 1 : i64, node = "inner"} : (!tensor_axes.tensor<f32, [B: b, Past: p, D: 4]>, !tensor_axes.tensor<f32, [B: b, New: n, D: 4]>) -> !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>
  %fixed = kernel.concat(%short, %new) {axis = 1 : i64, node = "fixed"} : (!tensor_axes.tensor<f32, [B: b, Two: 2, D: 4]>, !tensor_axes.tensor<f32, [B: b, New: n, D: 4]>) -> !tensor_axes.tensor<f32, [B: b, More: n + 2, D: 4]>
  %sum = kernel.zip(%inner, %inner) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "sum"} : (!tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>, !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>) -> !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>
  kernel.return %present, %both, %sum, %fixed names ["present", "both", "sum", "fixed"] : !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>, !tensor_axes.tensor<f32, [B: b, Twice: 2*n, D: 4]>, !tensor_axes.tensor<f32, [B: b, Total: p + n, D: 4]>, !tensor_axes.tensor<f32, [B: b, More: n + 2, D: 4]>
}
