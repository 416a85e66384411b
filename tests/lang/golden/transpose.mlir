kernel @transpose(%X: tensor<?x?xf32, i32>, %Y: tensor<?x?xf32, i32>) [B = 16] {
  %0 = program_id {axis = 0} : i32
  %1 = program_id {axis = 1} : i32
  %2 = tile_load %X, %0, %1 {shape = (16, 16), padding = 0} : tile<16x16xf32>
  %3 = permute %2 {order = (1, 0)} : tile<16x16xf32>
  tile_store %Y, %1, %0, %3 {shape = (16, 16)}
}
