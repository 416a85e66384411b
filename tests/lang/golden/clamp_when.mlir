kernel @clamp_when(%X: tensor<?xf32, i32>, %Y: tensor<?xf32, i32>, %limit: f32) [BLOCK = 32] {
  %0 = program_id {axis = 0} : i32
  %1 = tile_load %X, %0 {shape = (32,), padding = 0} : tile<32xf32>
  %2 = reduce %1 {axis = 0, kind = max} : f32
  %3 = gt %2, %limit : i1
  %4 = when %3 else(%1) -> (tile<32xf32>) {
    %5 = broadcast %limit {shape = (32,)} : tile<32xf32>
    %6 = minimum %1, %5 : tile<32xf32>
    yield %6
  }
  tile_store %Y, %0, %4 {shape = (32,)}
}
