kernel @row_sum(%X: tensor<?x?xf32, i32>, %Out: tensor<?xf32, i32>, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = program_id {axis = 0} : i32
  %2 = constant 0 : tile<32xf32>
  %3 = constant 0 : i32
  %4 = constant 32 : i32
  %5 = arange {start = 0, end = 32} : tile<32xi32>
  %6 = mul %1, %0 : i32
  %7 = broadcast %6 {shape = (32,)} : tile<32xi32>
  %8 = broadcast %N {shape = (32,)} : tile<32xi32>
  %9 = for %10 = %3 to %N step %4 iter_args(%11 = %2) -> (tile<32xf32>) {
    %12 = broadcast %10 {shape = (32,)} : tile<32xi32>
    %13 = add %12, %5 : tile<32xi32>
    %14 = add %7, %13 : tile<32xi32>
    %15 = lt %13, %8 : tile<32xi1>
    %16 = load %X, %14, mask=%15 : tile<32xf32>
    %17 = add %11, %16 : tile<32xf32>
    yield %17
  }
  %18 = reduce %9 {axis = 0, kind = sum} : f32
  store %Out, %1, %18
}
