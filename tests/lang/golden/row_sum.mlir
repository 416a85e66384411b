kernel @row_sum(%X: tensor<?x?xf32, i32>, %Out: tensor<?xf32, i32>, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = program_id {axis = 0} : i32
  %2 = constant 0 : tile<32xf32>
  %3 = constant 0 : i32
  %4 = constant 32 : i32
  %5 = for %6 = %3 to %N step %4 iter_args(%7 = %2) -> (tile<32xf32>) {
    %8 = arange {start = 0, end = 32} : tile<32xi32>
    %9 = broadcast %6 {shape = (32,)} : tile<32xi32>
    %10 = add %9, %8 : tile<32xi32>
    %11 = mul %1, %0 : i32
    %12 = broadcast %11 {shape = (32,)} : tile<32xi32>
    %13 = add %12, %10 : tile<32xi32>
    %14 = broadcast %N {shape = (32,)} : tile<32xi32>
    %15 = lt %10, %14 : tile<32xi1>
    %16 = load %X, %13, mask=%15 : tile<32xf32>
    %17 = add %7, %16 : tile<32xf32>
    yield %17
  }
  %18 = reduce %5 {axis = 0, kind = sum} : f32
  store %Out, %1, %18
}
