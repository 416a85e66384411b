kernel @matmul(%A: tensor<?x?xbf16, i32>, %B: tensor<?x?xbf16, i32>, %C: tensor<?x?xf32, i32>, %K: i32) [BM = 64, BN = 32, BK = 16] {
  %0 = program_id {axis = 0} : i32
  %1 = program_id {axis = 1} : i32
  %2 = constant 0 : tile<64x32xf32>
  %3 = constant 16 : i32
  %4 = add %K, %3 : i32
  %5 = constant 1 : i32
  %6 = sub %4, %5 : i32
  %7 = floordiv %6, %3 : i32
  %8 = constant 0 : i32
  %9 = for %10 = %8 to %7 step %5 iter_args(%11 = %2) -> (tile<64x32xf32>) {
    %12 = tile_load %A, %0, %10 {shape = (64, 16), padding = 0} : tile<64x16xbf16>
    %13 = tile_load %B, %10, %1 {shape = (16, 32), padding = 0} : tile<16x32xbf16>
    %14 = dot %12, %13, %11 : tile<64x32xf32>
    yield %14
  }
  tile_store %C, %0, %1, %9 {shape = (64, 32)}
}
