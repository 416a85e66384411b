kernel @softmax(%X: tensor<?x?xf32, i32>, %Y: tensor<?x?xf32, i32>) [N = 4097] {
  %0 = program_id {axis = 0} : i32
  %1 = constant 0 : i32
  %2 = tile_load %X, %0, %1 {shape = (1, 4097), padding = 0} : tile<1x4097xf32>
  %3 = reduce %2 {axis = 1, kind = max} : tile<1xf32>
  %4 = expand_dims %3 {axis = 1} : tile<1x1xf32>
  %5 = broadcast %4 {shape = (1, 4097)} : tile<1x4097xf32>
  %6 = sub %2, %5 : tile<1x4097xf32>
  %7 = exp %6 : tile<1x4097xf32>
  %8 = reduce %7 {axis = 1, kind = sum} : tile<1xf32>
  %9 = expand_dims %8 {axis = 1} : tile<1x1xf32>
  %10 = broadcast %9 {shape = (1, 4097)} : tile<1x4097xf32>
  %11 = div %7, %10 : tile<1x4097xf32>
  tile_store %Y, %0, %1, %11 {shape = (1, 4097)}
}
