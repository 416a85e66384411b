kernel @nested(%X: tensor<?x?xf32, i32>, %Out: tensor<?xf32, i32>, %M: i32, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = constant 0 : tile<32xf32>
  %2 = constant 0 : i32
  %3 = constant 1 : i32
  %4 = constant 32 : i32
  %5 = arange {start = 0, end = 32} : tile<32xi32>
  %6 = broadcast %N {shape = (32,)} : tile<32xi32>
  %7 = for %8 = %2 to %M step %3 iter_args(%9 = %1) -> (tile<32xf32>) {
    %10 = mul %8, %0 : i32
    %11 = broadcast %10 {shape = (32,)} : tile<32xi32>
    %12 = for %13 = %2 to %N step %4 iter_args(%14 = %1) -> (tile<32xf32>) {
      %15 = broadcast %13 {shape = (32,)} : tile<32xi32>
      %16 = add %15, %5 : tile<32xi32>
      %17 = add %11, %16 : tile<32xi32>
      %18 = lt %16, %6 : tile<32xi1>
      %19 = load %X, %17, mask=%18 : tile<32xf32>
      %20 = add %14, %19 : tile<32xf32>
      yield %20
    }
    %21 = mul %12, %12 : tile<32xf32>
    %22 = add %9, %21 : tile<32xf32>
    yield %22
  }
  tile_store %Out, %2, %7 {shape = (32,)}
}
