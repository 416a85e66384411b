kernel @mean_var(%X: tensor<?x?xf32, i32>, %Mean: tensor<?xf32, i32>, %Var: tensor<?xf32, i32>, %N: i32) [BLOCK = 32] {
  %0 = stride %X {axis = 0} : i32
  %1 = program_id {axis = 0} : i32
  %2 = constant 0 : tile<32xf32>
  %3 = constant 0 : i32
  %4 = constant 32 : i32
  %5 = arange {start = 0, end = 32} : tile<32xi32>
  %6 = mul %1, %0 : i32
  %7 = broadcast %6 {shape = (32,)} : tile<32xi32>
  %8 = broadcast %N {shape = (32,)} : tile<32xi32>
  %9, %10 = for %11 = %3 to %N step %4 iter_args(%12 = %2, %13 = %2) -> (tile<32xf32>, tile<32xf32>) {
    %14 = broadcast %11 {shape = (32,)} : tile<32xi32>
    %15 = add %14, %5 : tile<32xi32>
    %16 = add %7, %15 : tile<32xi32>
    %17 = lt %15, %8 : tile<32xi1>
    %18 = load %X, %16, mask=%17 : tile<32xf32>
    %19 = add %12, %18 : tile<32xf32>
    %20 = mul %18, %18 : tile<32xf32>
    %21 = add %13, %20 : tile<32xf32>
    yield %19, %21
  }
  %22 = reduce %9 {axis = 0, kind = sum} : f32
  %23 = cast %N {dtype = f32} : f32
  %24 = div %22, %23 : f32
  store %Mean, %1, %24
  %25 = reduce %10 {axis = 0, kind = sum} : f32
  %26 = div %25, %23 : f32
  %27 = mul %24, %24 : f32
  %28 = sub %26, %27 : f32
  store %Var, %1, %28
}
