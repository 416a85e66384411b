kernel @nested(%X: tensor<?x?xf32, i32>, %Out: tensor<?xf32, i32>, %M: i32, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = constant 0 : tile<32xf32>
  %2 = constant 0 : i32
  %3 = constant 1 : i32
  %4 = for %5 = %2 to %M step %3 iter_args(%6 = %1) -> (tile<32xf32>) {
    %7 = constant 0 : tile<32xf32>
    %8 = constant 0 : i32
    %9 = constant 32 : i32
    %10 = for %11 = %8 to %N step %9 iter_args(%12 = %7) -> (tile<32xf32>) {
      %13 = arange {start = 0, end = 32} : tile<32xi32>
      %14 = broadcast %11 {shape = (32,)} : tile<32xi32>
      %15 = add %14, %13 : tile<32xi32>
      %16 = mul %5, %0 : i32
      %17 = broadcast %16 {shape = (32,)} : tile<32xi32>
      %18 = add %17, %15 : tile<32xi32>
      %19 = broadcast %N {shape = (32,)} : tile<32xi32>
      %20 = lt %15, %19 : tile<32xi1>
      %21 = load %X, %18, mask=%20 : tile<32xf32>
      %22 = add %12, %21 : tile<32xf32>
      yield %22
    }
    %23 = mul %10, %10 : tile<32xf32>
    %24 = add %6, %23 : tile<32xf32>
    yield %24
  }
  %25 = constant 0 : i32
  tile_store %Out, %25, %4 {shape = (32,)}
}
