kernel @mean_var(%X: tensor<?x?xf32, i32>, %Mean: tensor<?xf32, i32>, %Var: tensor<?xf32, i32>, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = program_id {axis = 0} : i32
  %2 = constant 0 : tile<32xf32>
  %3 = constant 0 : tile<32xf32>
  %4 = constant 0 : i32
  %5 = constant 32 : i32
  %6, %7 = for %8 = %4 to %N step %5 iter_args(%9 = %2, %10 = %3) -> (tile<32xf32>, tile<32xf32>) {
    %11 = arange {start = 0, end = 32} : tile<32xi32>
    %12 = broadcast %8 {shape = (32,)} : tile<32xi32>
    %13 = add %12, %11 : tile<32xi32>
    %14 = mul %1, %0 : i32
    %15 = broadcast %14 {shape = (32,)} : tile<32xi32>
    %16 = add %15, %13 : tile<32xi32>
    %17 = broadcast %N {shape = (32,)} : tile<32xi32>
    %18 = lt %13, %17 : tile<32xi1>
    %19 = load %X, %16, mask=%18 : tile<32xf32>
    %20 = add %9, %19 : tile<32xf32>
    %21 = mul %19, %19 : tile<32xf32>
    %22 = add %10, %21 : tile<32xf32>
    yield %20, %22
  }
  %23 = reduce %6 {axis = 0, kind = sum} : f32
  %24 = cast %N {dtype = f32} : f32
  %25 = div %23, %24 : f32
  store %Mean, %1, %25
  %26 = reduce %7 {axis = 0, kind = sum} : f32
  %27 = cast %N {dtype = f32} : f32
  %28 = div %26, %27 : f32
  %29 = mul %25, %25 : f32
  %30 = sub %28, %29 : f32
  store %Var, %1, %30
}
